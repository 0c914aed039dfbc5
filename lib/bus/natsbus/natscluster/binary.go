package natscluster

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
)

// Package is the main package of nats-server that Binary builds: the version the test's
// module requires (lib requires it for the embedded server).
const Package = "github.com/nats-io/nats-server/v2"

var built struct {
	once sync.Once
	dir  string
	path string
	err  error
}

// Binary returns the path of a nats-server binary: $NATS_SERVER when set, otherwise one built
// with `go build` from the module of the running test (its working directory) on the first
// call, and reused by the later calls of the same test binary. Exit deletes it.
func Binary() (string, error) {
	if p := os.Getenv("NATS_SERVER"); p != "" {
		return p, nil
	}
	built.once.Do(func() {
		dir, err := os.MkdirTemp("", "natscluster-")
		if err != nil {
			built.err = fmt.Errorf("build nats-server: %w", err)
			return
		}
		built.dir = dir
		out := filepath.Join(dir, "nats-server")
		// `go test` puts its own go first in PATH.
		cmd := exec.Command("go", "build", "-o", out, Package)
		if msg, err := cmd.CombinedOutput(); err != nil {
			built.err = fmt.Errorf("build nats-server (go build %s in a module that requires it, or set NATS_SERVER): %w\n%s", Package, err, msg)
			return
		}
		built.path = out
	})
	return built.path, built.err
}

// Exit deletes the binary Binary built, if any, and exits with code: the end of a TestMain
// (goleak.VerifyTestMain(m, goleak.Cleanup(natscluster.Exit))).
func Exit(code int) {
	if built.dir != "" {
		_ = os.RemoveAll(built.dir)
	}
	os.Exit(code)
}
