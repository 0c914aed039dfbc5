package daemon

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"math"
	"net"
	"runtime/debug"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/auditlens/auditlens/lib/buildinfo"
	"github.com/auditlens/auditlens/lib/bus/natsbus"
	"github.com/auditlens/auditlens/lib/transport"
)

// Stages stop upstream first: a stage is cancelled only after the one before it returned.
func TestRunStagesDrainsUpstreamFirst(t *testing.T) {
	var mu sync.Mutex
	var order []string
	stage := func(name string, linger time.Duration) Component {
		return ComponentFuncs{RunFunc: func(ctx context.Context) error {
			<-ctx.Done()
			time.Sleep(linger) // upstream still flushing: downstream must still be running
			mu.Lock()
			order = append(order, name)
			mu.Unlock()
			return nil
		}}
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() { time.Sleep(50 * time.Millisecond); cancel() }()
	err := RunStages(ctx, []Component{stage("ingest", 30*time.Millisecond), stage("classify", 0), stage("report", 0)}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(order, ","); got != "ingest,classify,report" {
		t.Fatalf("stop order %s", got)
	}
}

func TestRunStagesReportsFailure(t *testing.T) {
	boom := errors.New("boom")
	stopped := make(chan struct{})
	err := RunStages(context.Background(), []Component{
		ComponentFuncs{RunFunc: func(ctx context.Context) error { <-ctx.Done(); close(stopped); return nil }},
		ComponentFuncs{RunFunc: func(ctx context.Context) error { return boom }},
	}, slog.New(slog.DiscardHandler))
	if !errors.Is(err, boom) {
		t.Fatalf("got %v", err)
	}
	select {
	case <-stopped:
	default:
		t.Fatal("healthy stage not stopped after another failed")
	}
}

func TestMainBadInput(t *testing.T) {
	spec := Spec{Name: "x", Synopsis: "x [flags]", Build: func(context.Context, Deps) ([]Component, error) { return nil, nil }}
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--nope"}, ExitUsage, "flag provided but not defined: -nope"},
		{[]string{"--log-format", "xml"}, ExitUsage, "--log-format"},
		{[]string{"--cluster", "a.b"}, ExitUsage, "--cluster"},
		{[]string{"--nats-url", "embedded", "--nats-store-dir", ""}, ExitUsage, "--nats-store-dir"},
		{[]string{"stray"}, ExitUsage, `unexpected argument "stray"`},
		{[]string{"--help"}, 0, "AUDITLENS_NATS_URL"},
	} {
		var out bytes.Buffer
		code := Main(spec, c.args, &out)
		if code != c.code || !strings.Contains(out.String(), c.want) {
			t.Errorf("%v: code %d, output %q; want %d and %q", c.args, code, out.String(), c.code, c.want)
		}
	}
}

// --version prints the build to Stdout without opening anything (the stage builder fails).
func TestMainVersion(t *testing.T) {
	var stdout, stderr bytes.Buffer
	spec := Spec{Name: "x", Stdout: &stdout, Build: func(context.Context, Deps) ([]Component, error) { return nil, errors.New("built") }}
	if code := Main(spec, []string{"--version"}, &stderr); code != 0 || stderr.Len() != 0 {
		t.Fatalf("code %d, stderr %q", code, stderr.String())
	}
	if want := "x " + buildinfo.Get().Version + "\ncommit: "; !strings.HasPrefix(stdout.String(), want) || !strings.Contains(stdout.String(), "\ngo: go") {
		t.Fatalf("--version printed %q", stdout.String())
	}
}

// A command's GC target applies unless the operator set GOGC.
func TestGCPercentYieldsToGOGC(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	t.Setenv("GOGC", "")
	setGCPercent(321)
	if got := debug.SetGCPercent(100); got != 321 {
		t.Fatalf("GC percent %d, want 321", got)
	}
	t.Setenv("GOGC", "50")
	setGCPercent(321)
	if got := debug.SetGCPercent(100); got != 100 {
		t.Fatalf("GC percent %d with GOGC set, want it left alone (100)", got)
	}
}

// A command's soft memory limit applies unless the operator set GOMEMLIMIT, and an embedded
// NATS server's share is added to it.
func TestMemoryLimitYieldsToGOMEMLIMIT(t *testing.T) {
	defer debug.SetMemoryLimit(debug.SetMemoryLimit(-1))
	const own = 40 << 20
	stop := errors.New("stop after the bus is open")
	run := func(args ...string) int64 {
		debug.SetMemoryLimit(math.MaxInt64)
		spec := Spec{
			Name:        "limited",
			MemoryLimit: func() int64 { return own },
			Build:       func(context.Context, Deps) ([]Component, error) { return nil, stop },
		}
		var out bytes.Buffer
		if code := Main(spec, append([]string{"--metrics-addr", "127.0.0.1:0"}, args...), &out); code != 1 || !strings.Contains(out.String(), stop.Error()) {
			t.Fatalf("exit %d, want 1 after %q: %s", code, stop, out.String())
		}
		return debug.SetMemoryLimit(-1)
	}
	t.Setenv("GOMEMLIMIT", "")
	store := "--nats-store-dir=" + t.TempDir()
	if got, want := run("--nats-url", "embedded", store), int64(own)+EmbeddedNATSMemory(transport.EmbeddedDedupWindow); got != want {
		t.Errorf("embedded NATS: memory limit %d, want %d", got, want)
	}
	if got, want := run("--nats-url", "embedded", "--nats-dedup-window", "1m", store), int64(own)+EmbeddedNATSMemory(time.Minute); got != want {
		t.Errorf("embedded NATS, 1m window: memory limit %d, want %d", got, want)
	}
	spec0 := Spec{Name: "unlimited", MemoryLimit: func() int64 { return 0 }, Build: func(context.Context, Deps) ([]Component, error) { return nil, stop }}
	debug.SetMemoryLimit(math.MaxInt64)
	if code := Main(spec0, []string{"--metrics-addr", "127.0.0.1:0", "--nats-url", "embedded", store}, &bytes.Buffer{}); code != 1 {
		t.Fatalf("exit %d, want 1", code)
	}
	if got := debug.SetMemoryLimit(-1); got != math.MaxInt64 {
		t.Errorf("memory limit %d for a command that asks for none (0), want none even with embedded NATS", got)
	}
	t.Setenv("GOMEMLIMIT", "1GiB")
	if got := run("--nats-url", "embedded", store); got != math.MaxInt64 {
		t.Errorf("memory limit %d with GOMEMLIMIT set, want it left alone", got)
	}
}

// TestMainWaitsForTheBus: a service started before its bus (a pod beside a DNS or NATS still
// starting) retries instead of exiting, and runs once the server is up; with nothing coming up
// it gives up after BusConnectWait with the error.
func TestMainWaitsForTheBus(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	built := make(chan struct{}, 1)
	spec := Spec{Name: "x", Synopsis: "x [flags]", Build: func(_ context.Context, d Deps) ([]Component, error) {
		if d.Bus == nil {
			return nil, errors.New("no bus")
		}
		built <- struct{}{}
		// Stages run until a signal or a failure: this one fails at once, ending the run.
		return []Component{ComponentFuncs{RunFunc: func(context.Context) error { return errors.New("the stage ran") }}}, nil
	}}
	args := []string{"--nats-url", "nats://" + addr, "--metrics-addr", "", "--log-format", "text"}

	// Nothing listens: the service gives up after the wait, naming the bus.
	defer func(w time.Duration) { BusConnectWait = w }(BusConnectWait)
	BusConnectWait = 1500 * time.Millisecond
	var out bytes.Buffer
	if code := Main(spec, args, &out); code != 1 || !strings.Contains(out.String(), "bus not reachable yet") || !strings.Contains(out.String(), "open bus") {
		t.Fatalf("no server: code %d, output %q", code, out.String())
	}

	// The server comes up a second after the service starts: it connects and runs.
	BusConnectWait = time.Minute
	srvc := make(chan *server.Server, 1)
	go func() {
		time.Sleep(time.Second)
		srv, err := natsbus.StartServer(t.TempDir(), addr)
		if err != nil {
			t.Error(err)
		}
		srvc <- srv
	}()
	out.Reset()
	code := Main(spec, args, &out)
	if srv := <-srvc; srv != nil {
		srv.Shutdown()
	}
	if code != 1 || !strings.Contains(out.String(), "bus not reachable yet") || !strings.Contains(out.String(), "the stage ran") {
		t.Fatalf("server up after 1s: code %d, output %q", code, out.String())
	}
	select {
	case <-built:
	default:
		t.Fatal("the stages were not built")
	}
}
