package node

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// ServeNATS runs a NATS server with JetStream on addr, storing in dir, until ctx ends: the
// node's bus, outside the cluster like a managed one.
func ServeNATS(ctx context.Context, addr, dir string, log *slog.Logger) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("nats: %w", err)
	}
	p, err := strconv.Atoi(port)
	if err != nil {
		return fmt.Errorf("nats: port %q: %w", port, err)
	}
	s, err := server.NewServer(&server.Options{
		ServerName: "auditlens-node", Host: host, Port: p, JetStream: true, StoreDir: dir,
		MaxPayload: 8 << 20, NoSigs: true,
	})
	if err != nil {
		return fmt.Errorf("nats: %w", err)
	}
	s.Start()
	if !s.ReadyForConnections(30 * time.Second) {
		s.Shutdown()
		return fmt.Errorf("nats: not ready on %s after 30s", addr)
	}
	log.Info("nats serving", "addr", addr, "store", dir)
	<-ctx.Done()
	s.Shutdown()
	s.WaitForShutdown()
	return nil
}
