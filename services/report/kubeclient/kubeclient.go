// Package kubeclient is how report reaches the Kubernetes apiserver it writes
// UpgradeReadiness objects to and reads namespace labels from: in-cluster by default, or a URL
// with a token file and a CA bundle.
package kubeclient

import (
	"errors"
	"flag"
	"fmt"
	"strings"

	"k8s.io/client-go/rest"
)

// Config names the apiserver.
type Config struct {
	// URL of the apiserver; empty: in-cluster (the pod's service account).
	URL string
	// TokenFile and CAFile are the bearer token (read again when it changes) and the CA
	// bundle when URL is set.
	TokenFile, CAFile string
}

// RegisterFlags registers --report-kube-url, --report-kube-token-file and --report-kube-ca-file.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.URL, "report-kube-url", c.URL, "`URL` of the apiserver for --readiness-objects, --owners-namespace-labels and the authenticated console's token and access reviews (empty: in-cluster, the pod's service account)")
	fs.StringVar(&c.TokenFile, "report-kube-token-file", c.TokenFile, "`file` holding the bearer token for --report-kube-url (read again when it changes)")
	fs.StringVar(&c.CAFile, "report-kube-ca-file", c.CAFile, "CA bundle `file` for --report-kube-url (empty: the system's)")
}

// Validate checks c and never changes it.
func (c Config) Validate() error {
	if c.URL == "" && (c.TokenFile != "" || c.CAFile != "") {
		return errors.New("--report-kube-token-file and --report-kube-ca-file need --report-kube-url")
	}
	if c.URL != "" && !strings.HasPrefix(c.URL, "https://") && !strings.HasPrefix(c.URL, "http://") {
		return fmt.Errorf("--report-kube-url %q: want an http(s) URL", c.URL)
	}
	return nil
}

// REST is the client configuration c names.
func (c Config) REST() (*rest.Config, error) {
	if c.URL == "" {
		rc, err := rest.InClusterConfig()
		if err != nil {
			return nil, fmt.Errorf("apiserver in-cluster (or set --report-kube-url): %w", err)
		}
		return rc, nil
	}
	return &rest.Config{Host: c.URL, BearerTokenFile: c.TokenFile, TLSClientConfig: rest.TLSClientConfig{CAFile: c.CAFile}}, nil
}
