package main

import (
	"context"
	"log/slog"
	"net"
	"time"

	"github.com/auditlens/auditlens/lib/bus"
	"github.com/auditlens/auditlens/lib/daemon"
)

// consoleURL is the URL of the console's index on addr (--report-console-addr) for a browser on
// this machine: a host left unspecified (":9100", "0.0.0.0:9100", "[::]:9100") is
// 127.0.0.1. Empty when addr serves nothing or names no port to open.
func consoleURL(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil || port == "" || port == "0" {
		return ""
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = "127.0.0.1"
	}
	return "http://" + net.JoinHostPort(host, port) + "/"
}

// announce is a stage that, once the bus and every stage in comps are ready, logs the URL of
// the console once (at INFO), then waits to be stopped.
func announce(url string, comps []daemon.Component, b bus.Bus, log *slog.Logger) daemon.Component {
	return daemon.ComponentFuncs{RunFunc: func(ctx context.Context) error {
		if url == "" {
			<-ctx.Done()
			return nil
		}
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for !ready(comps, b) {
			select {
			case <-ctx.Done():
				return nil
			case <-tick.C:
			}
		}
		log.Info("ready: open the console", "url", url)
		<-ctx.Done()
		return nil
	}}
}

func ready(comps []daemon.Component, b bus.Bus) bool {
	if b != nil && b.Ready() != nil {
		return false
	}
	for _, c := range comps {
		if c.Ready() != nil {
			return false
		}
	}
	return true
}
