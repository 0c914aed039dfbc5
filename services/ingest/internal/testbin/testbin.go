// Package testbin builds the ingest binary for the tests that run it as a process (kill -9,
// flags, shutdown, memory).
package testbin

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/auditlens/auditlens/lib/testkit"
	"go.uber.org/goleak"
)

// Main is a TestMain: it builds cmd/ingest, sets *bin to its path, runs the tests and then
// fails them when a goroutine they started is still running.
func Main(m *testing.M, bin *string) {
	dir, err := os.MkdirTemp("", "ingest-bin")
	if err != nil {
		panic(err)
	}
	module, err := testkit.ModuleDir()
	if err != nil {
		panic(err)
	}
	*bin = filepath.Join(dir, "ingest")
	out, err := exec.Command("go", "build", "-o", *bin, filepath.Join(module, "cmd", "ingest")).CombinedOutput()
	if err != nil {
		os.Stderr.Write(out)
		panic(err)
	}
	code := m.Run()
	os.RemoveAll(dir)
	if code == 0 {
		// opencensus's worker is started by init in the Pub/Sub client's dependencies.
		if err := goleak.Find(goleak.IgnoreAnyFunction("github.com/nats-io/nats-server/v2/server.(*Server).Start.func1"),
			goleak.IgnoreTopFunction("go.opencensus.io/stats/view.(*worker).start")); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}
