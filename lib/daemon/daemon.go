// Package daemon is the shared skeleton of every auditlens command: flags with env twins,
// logging, metrics and health endpoints, the bus, and one run group that shuts the stages down
// upstream first on SIGINT/SIGTERM.
package daemon

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/debug"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/auditlens/auditlens/lib/backoff"
	"github.com/auditlens/auditlens/lib/buildinfo"
	"github.com/auditlens/auditlens/lib/bus"
	"github.com/auditlens/auditlens/lib/bus/natsbus"
	"github.com/auditlens/auditlens/lib/flagenv"
	"github.com/auditlens/auditlens/lib/telemetry"
	"github.com/auditlens/auditlens/lib/transport"
)

// Component is one long-running stage.
type Component interface {
	// Run works until ctx is cancelled, then drains what it holds and returns nil.
	Run(ctx context.Context) error
	// Ready reports whether the stage can do its work now (for /readyz).
	Ready() error
}

// Deps is what Build receives.
type Deps struct {
	Bus      bus.Bus
	Cluster  string
	Logger   *slog.Logger
	Registry *prometheus.Registry
	// HTTP is served on --metrics-addr beside /metrics, /healthz and /readyz: components may
	// add their own pages (e.g. a report) to it.
	HTTP *http.ServeMux
}

// Spec describes one command.
type Spec struct {
	Name     string // binary name, used in logs and as the default consumer group
	Synopsis string // first lines of --help
	// Stdout receives --version (nil: os.Stdout).
	Stdout io.Writer
	// DefaultMetricsAddr of --metrics-addr.
	DefaultMetricsAddr string
	// Flags registers the command's own flags; it runs before parsing.
	Flags func(fs *flag.FlagSet)
	// Validate checks the command's own flags after parsing; nil means no check.
	Validate func() error
	// DataRoot is the root of the default data locations (the embedded NATS store's default
	// is DataRoot/nats); empty means DataRoot().
	DataRoot string
	// NoBus skips opening the bus (for commands that do not need one).
	NoBus bool
	// Build makes the stages once the bus is open, in pipeline order (upstream first).
	Build func(ctx context.Context, d Deps) ([]Component, error)
	// GCPercent, when set, is the garbage collector's target for this command unless the
	// GOGC environment variable says otherwise (see runtime/debug.SetGCPercent).
	GCPercent int
	// MemoryLimit, when set, returns the soft memory limit (runtime/debug.SetMemoryLimit) for
	// this command once its flags are parsed, unless the GOMEMLIMIT environment variable says
	// otherwise: the most the command's own stages hold at once, with room to collect (0: no
	// limit). An embedded NATS server's share (EmbeddedNATSMemory) is added. Without a limit the heap
	// grows to GCPercent past what is live before a collection, so the peak depends on how
	// long the input keeps the process busy; with one it stays near the limit.
	MemoryLimit func() int64
}

// ExitUsage is the exit code of a bad flag or value.
const ExitUsage = 2

// Main runs spec with args (without the program name) and returns the process exit code.
// --version alone prints the build (buildinfo) and exits 0.
func Main(spec Spec, args []string, stderr io.Writer) int {
	if buildinfo.IsVersionFlag(args) {
		out := spec.Stdout
		if out == nil {
			out = os.Stdout
		}
		_, _ = io.WriteString(out, buildinfo.Get().String(spec.Name))
		return 0
	}
	fs := flag.NewFlagSet(spec.Name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	var tel telemetry.Config
	var tr transport.Config
	tel.RegisterFlags(fs, spec.DefaultMetricsAddr)
	if !spec.NoBus {
		root := spec.DataRoot
		if root == "" {
			root = DataRoot()
		}
		tr.RegisterFlags(fs, filepath.Join(root, "nats"))
	}
	if spec.Flags != nil {
		spec.Flags(fs)
	}
	flagenv.Usage(fs, spec.Synopsis)
	if err := flagenv.Parse(fs, args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintf(stderr, "%s: %v\n", spec.Name, err)
		return ExitUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "%s: unexpected argument %q (see --help)\n", spec.Name, fs.Arg(0))
		return ExitUsage
	}
	check := []func() error{tel.Validate}
	if !spec.NoBus {
		check = append(check, tr.Validate)
	}
	if spec.Validate != nil {
		check = append(check, spec.Validate)
	}
	for _, v := range check {
		if err := v(); err != nil {
			fmt.Fprintf(stderr, "%s: %v\n", spec.Name, err)
			return ExitUsage
		}
	}
	log, _ := telemetry.NewLogger(tel.LogFormat, tel.LogLevel, stderr)
	log = log.With("service", spec.Name)
	setGCPercent(spec.GCPercent)
	if spec.MemoryLimit != nil {
		limit := spec.MemoryLimit()
		if limit > 0 && !spec.NoBus && !tr.UseKafka() && tr.NATS.URL == natsbus.Embedded {
			window := tr.NATS.Duplicates
			if window <= 0 {
				window = transport.EmbeddedDedupWindow
			}
			limit += EmbeddedNATSMemory(window)
		}
		setMemoryLimit(limit)
	}
	if err := run(spec, tel, tr, log); err != nil {
		log.Error("exiting", "err", err)
		return 1
	}
	return 0
}

// setGCPercent sets the collector's target to p (when positive) unless GOGC is set.
func setGCPercent(p int) {
	if p > 0 && os.Getenv("GOGC") == "" {
		debug.SetGCPercent(p)
	}
}

// setMemoryLimit sets the soft memory limit to n bytes (when positive) unless GOMEMLIMIT is set.
func setMemoryLimit(n int64) {
	if n > 0 && os.Getenv("GOMEMLIMIT") == "" {
		debug.SetMemoryLimit(n)
	}
}

// EmbeddedNATSMemory is about the most memory an in-process NATS server holds while the bus
// is published to as fast as this process can: chiefly the message ids of the
// de-duplication window (~200 bytes each; a stream stores messages in one goroutine, ~65k per
// second on this project's 2-core machine, so about 13 MB per second of window), plus its
// stream and file-store buffers. Measured with ingest over 800 MB of audit log: 150-175 MB
// of live heap with the 10s window. Should a faster machine hold more, the limit is soft:
// the collector works harder (at most half the CPU) rather than fail.
func EmbeddedNATSMemory(dedupWindow time.Duration) int64 {
	return 32<<20 + int64(dedupWindow.Seconds()*float64(16<<20))
}

func run(spec Spec, tel telemetry.Config, tr transport.Config, log *slog.Logger) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	reg := telemetry.NewRegistry()
	d := Deps{Cluster: tr.Cluster, Logger: log, Registry: reg, HTTP: http.NewServeMux()}
	if !spec.NoBus {
		b, err := openBus(ctx, tr, log, reg)
		if err != nil {
			return fmt.Errorf("open bus: %w", err)
		}
		defer b.Close()
		d.Bus = b
	}
	comps, err := spec.Build(ctx, d)
	if err != nil {
		return err
	}
	checks := map[string]telemetry.Check{}
	if d.Bus != nil {
		checks["bus"] = d.Bus.Ready
	}
	for i, c := range comps {
		checks[fmt.Sprintf("stage%d", i)] = c.Ready
	}
	if tel.MetricsAddr != "" {
		srv, err := telemetry.NewServer(tel.MetricsAddr, reg, checks, d.HTTP)
		if err != nil {
			return err
		}
		sctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go func() {
			if err := srv.Run(sctx); err != nil {
				log.Error("metrics server", "err", err)
			}
		}()
		log.Info("serving metrics", "addr", srv.Addr())
	}
	log.Info("started", "stages", len(comps))
	return RunStages(ctx, comps, log)
}

// BusConnectWait is how long a service waits at start for a bus it cannot reach (its name not
// resolvable yet, its server still starting: a pod started beside the cluster's DNS) before it
// exits. It is under the two minutes the manifests' startup probes allow.
var BusConnectWait = time.Minute

// openBus opens the bus, retrying with backoff for BusConnectWait while it is unreachable;
// any other error (a refused stream configuration, bad credentials) returns at once.
func openBus(ctx context.Context, tr transport.Config, log *slog.Logger, reg prometheus.Registerer) (bus.Bus, error) {
	bo := backoff.Backoff{Min: 250 * time.Millisecond, Max: 5 * time.Second}
	deadline := time.Now().Add(BusConnectWait)
	for attempt := 1; ; attempt++ {
		b, err := transport.Open(ctx, tr, log, reg)
		if err == nil || !errors.Is(err, bus.ErrUnavailable) || !time.Now().Before(deadline) {
			return b, err
		}
		wait := bo.Delay(attempt)
		log.Warn("bus not reachable yet; retrying", "err", err, "retry_in", wait, "gives_up_in", time.Until(deadline).Round(time.Second))
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(wait):
		}
	}
}

// RunStages runs the components until ctx is done or one fails, then stops them upstream
// first: each is cancelled only after the one before it has returned, so what it still
// holds flows downstream before the next drains.
func RunStages(ctx context.Context, comps []Component, log *slog.Logger) error {
	type result struct {
		i   int
		err error
	}
	cancels := make([]context.CancelFunc, len(comps))
	dones := make([]chan error, len(comps))
	failed := make(chan result, len(comps))
	for i, c := range comps {
		cctx, cancel := context.WithCancel(context.Background())
		cancels[i] = cancel
		dones[i] = make(chan error, 1)
		go func() {
			err := c.Run(cctx)
			dones[i] <- err
			if err != nil {
				failed <- result{i, err}
			}
		}()
	}
	var firstErr error
	select {
	case <-ctx.Done():
		log.Info("shutting down: draining upstream first")
	case r := <-failed:
		firstErr = fmt.Errorf("stage %d: %w", r.i, r.err)
	}
	for i := range comps {
		cancels[i]()
		select {
		case err := <-dones[i]:
			if err != nil && firstErr == nil {
				firstErr = err
			}
		case <-time.After(60 * time.Second):
			log.Error("stage did not stop within 60s", "stage", i)
		}
	}
	return firstErr
}

// DataRootEnv names the one environment variable that moves every default data location
// (NATS store nats/, checkpoints/, embedded ClickHouse chdb/) under one directory. In the
// all-in-one it is the twin of --data-root.
const DataRootEnv = "AUDITLENS_DATA_ROOT"

// DataRoot is the root of the default data locations: $AUDITLENS_DATA_ROOT, else ./.data.
func DataRoot() string {
	if d := os.Getenv(DataRootEnv); d != "" {
		return d
	}
	return ".data"
}

// CloseAtStop is a stage that holds c open until it is stopped, then closes it: listed after
// the stages that use c, it closes only once they have drained.
func CloseAtStop(c io.Closer) Component {
	return ComponentFuncs{RunFunc: func(ctx context.Context) error {
		<-ctx.Done()
		return c.Close()
	}}
}

// ComponentFuncs adapts two functions to a Component.
type ComponentFuncs struct {
	RunFunc   func(ctx context.Context) error
	ReadyFunc func() error
}

// Run implements Component.
func (c ComponentFuncs) Run(ctx context.Context) error { return c.RunFunc(ctx) }

// Ready implements Component; nil ReadyFunc is always ready.
func (c ComponentFuncs) Ready() error {
	if c.ReadyFunc == nil {
		return nil
	}
	return c.ReadyFunc()
}
