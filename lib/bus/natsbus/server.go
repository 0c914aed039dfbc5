package natsbus

import (
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// StartServer starts an in-process nats-server with JetStream on a file store in dir. With
// listen empty it accepts in-process connections only.
func StartServer(dir, listen string) (*server.Server, error) {
	opts := &server.Options{
		ServerName: "auditlens-embedded",
		JetStream:  true,
		StoreDir:   dir,
		NoSigs:     true,
		NoLog:      true,
		// One process, one client: generous payloads for huge audit events.
		MaxPayload: 8 << 20,
	}
	if listen == "" {
		opts.DontListen = true
	} else {
		host, p, err := net.SplitHostPort(listen)
		if err != nil {
			return nil, fmt.Errorf("--nats-embedded-listen %q: %w", listen, err)
		}
		port, err := strconv.ParseUint(p, 10, 16)
		if err != nil {
			return nil, fmt.Errorf("--nats-embedded-listen %q: bad port %q", listen, p)
		}
		if host == "" {
			host = "0.0.0.0"
		}
		opts.Host, opts.Port = host, int(port)
	}
	srv, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("start embedded nats: %w", err)
	}
	srv.Start()
	if !srv.ReadyForConnections(startTimeout) {
		srv.Shutdown()
		return nil, fmt.Errorf("start embedded nats in %s: not ready after %s (is the store locked by another process?)", dir, startTimeout)
	}
	return srv, nil
}

// startTimeout bounds the embedded server's start: recovering its store takes seconds, more on
// a machine loaded to several times its cores (seen: over 10 s in CI beside other test jobs).
const startTimeout = 30 * time.Second

func (b *Bus) shutdownServer() {
	if b.srv != nil {
		b.srv.Shutdown()
		b.srv.WaitForShutdown()
	}
}
