// Command classify matches kube-apiserver audit events against the rule catalogue: as a
// service between the AUDIT_EVENTS and AUDIT_FINDINGS streams, or offline with `classify scan`
// (audit logs), `classify manifests` (manifests) and `classify catalogue` (the upgrade checklist).
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/auditlens/auditlens/lib/daemon"
	"github.com/auditlens/auditlens/services/classify"
)

const synopsis = `classify [flags]
classify scan [flags] FILE...        audit logs offline (see classify scan --help)
classify manifests [flags] PATH...   Kubernetes manifests (see classify manifests --help)
classify catalogue --from X.Y --to X.Y   what is removed and deprecated between two releases

classify consumes audit events (stream AUDIT_EVENTS, consumer group --classify-group, shared
by replicas), matches them against the embedded rule catalogue (plus --rules-file), and
publishes one protobuf Finding per request and rule to AUDIT_FINDINGS, acknowledging
each event once its findings are stored. Undecodable events go to AUDIT_DEADLETTER.`

// pluginName is the binary's name as a kubectl plugin (the release's krew archive): kubectl
// runs it for `kubectl auditlens ...`.
const pluginName = "kubectl-auditlens"

const pluginSynopsis = `usage: kubectl auditlens COMMAND [flags]

Finds what blocks a Kubernetes upgrade, from the cluster's audit logs and manifests:

  kubectl auditlens scan [flags] FILE...        audit logs (plain, .gz, or - for stdin): who still calls
                                                removed APIs and other risky features
  kubectl auditlens manifests [flags] PATH...   Kubernetes manifests, rendered charts, or the Helm
                                                releases stored in the cluster (--helm-live)
  kubectl auditlens catalogue --from X.Y --to X.Y   what is removed and deprecated between two releases

Each command's flags: kubectl auditlens COMMAND --help. Messages name the commands as classify
scan, classify manifests and classify catalogue: the plugin is auditlens's classify binary.
`

func main() {
	if filepath.Base(os.Args[0]) == pluginName {
		os.Exit(runPlugin(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
	}
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

// runPlugin is run as the kubectl plugin: the offline commands only, never the service.
func runPlugin(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) > 0 && subcommands[args[0]] != nil {
		return subcommands[args[0]](args[1:], stdin, stdout, stderr)
	}
	if len(args) > 0 && (args[0] == "-h" || args[0] == "--help" || args[0] == "-help" || args[0] == "help") {
		fmt.Fprint(stdout, pluginSynopsis)
		return 0
	}
	fmt.Fprint(stderr, pluginSynopsis)
	if len(args) > 0 {
		fmt.Fprintf(stderr, "\nkubectl auditlens: unknown command %q: want one of scan, manifests, catalogue\n", strings.TrimSpace(args[0]))
	}
	return 2
}

func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) > 0 && subcommands[args[0]] != nil {
		return subcommands[args[0]](args[1:], stdin, stdout, stderr)
	}
	cfg := classify.DefaultConfig()
	return daemon.Main(daemon.Spec{
		Name:               "classify",
		Synopsis:           synopsis,
		DefaultMetricsAddr: ":9102",
		Flags:              cfg.RegisterFlags,
		// A closure, not the method value cfg.Validate: that would copy cfg before the flags
		// are parsed into it.
		Validate: func() error { return cfg.Validate() },
		Build: func(_ context.Context, d daemon.Deps) ([]daemon.Component, error) {
			return classify.New(cfg, d)
		},
	}, args, stderr)
}
