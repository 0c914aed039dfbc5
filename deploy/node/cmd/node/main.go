// Command node brings up (`node up`) and tears down (`node down`) the one-node Kubernetes
// cluster of docs/node.md; `node dns` and `node nats` are the node's resolver and NATS server,
// which `up` starts in the background.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/auditlens/auditlens/deploy/node"
)

func main() {
	if len(os.Args) < 2 {
		fail(fmt.Errorf("usage: node up|down|dns|nats [flags]"))
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	fs := flag.NewFlagSet(os.Args[1], flag.ExitOnError)
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	switch os.Args[1] {
	case "up", "down":
		repo := fs.String("repo", ".", "the repository's root")
		_ = fs.Parse(os.Args[2:])
		abs, err := filepath.Abs(*repo)
		if err != nil {
			fail(err)
		}
		cfg := node.DefaultConfig(abs)
		if cfg.Self, err = os.Executable(); err != nil {
			fail(err)
		}
		n, err := node.New(cfg)
		if err != nil {
			fail(err)
		}
		if os.Args[1] == "up" {
			err = n.Up(ctx)
		} else {
			err = n.Down()
		}
		if err != nil {
			fail(err)
		}
	case "dns":
		addr := fs.String("addr", "", "UDP address to answer on")
		kubeconfig := fs.String("kubeconfig", "", "kubeconfig to watch Services with")
		_ = fs.Parse(os.Args[2:])
		if err := node.ServeDNS(ctx, *addr, *kubeconfig, log); err != nil {
			fail(err)
		}
	case "nats":
		addr := fs.String("addr", "", "address to listen on")
		store := fs.String("store", "", "JetStream store directory")
		_ = fs.Parse(os.Args[2:])
		if err := node.ServeNATS(ctx, *addr, *store, log); err != nil {
			fail(err)
		}
	default:
		fail(fmt.Errorf("unknown command %q: usage: node up|down|dns|nats [flags]", os.Args[1]))
	}
}

func fail(err error) {
	fmt.Fprintf(os.Stderr, "node: %v\n", err)
	os.Exit(1)
}
