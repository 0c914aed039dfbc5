// Package testnats starts NATS JetStream servers for ingest's tests and reads back what
// the streams hold.
package testnats

import (
	"context"
	"errors"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/auditlens/auditlens/lib/bus"
	"github.com/auditlens/auditlens/lib/bus/natsbus"
	"github.com/auditlens/auditlens/lib/enginetest"
)

// Server is an embedded JetStream server reachable over TCP, restartable on the same
// store and port.
type Server struct {
	t    testing.TB
	dir  string
	addr string
	srv  *server.Server
	// stock: a server as shipped (nats-server's default 1 MiB max payload), not the
	// embedded server's 8 MiB.
	stock bool
}

// FreeAddr is a local TCP address nothing listens on.
func FreeAddr(t testing.TB) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// Start starts the embedded server (lib/bus/natsbus) on a free port, stopped at the end of t.
func Start(t testing.TB) *Server {
	t.Helper()
	n := &Server{t: t, dir: t.TempDir(), addr: FreeAddr(t)}
	n.Start()
	t.Cleanup(n.Stop)
	return n
}

// StartStock starts a JetStream server with nats-server's defaults (1 MiB max payload),
// as an external server runs unless told otherwise.
func StartStock(t testing.TB) *Server {
	t.Helper()
	n := &Server{t: t, dir: t.TempDir(), addr: FreeAddr(t), stock: true}
	n.Start()
	t.Cleanup(n.Stop)
	return n
}

// Start starts the server again, on the same store and port.
func (n *Server) Start() {
	n.t.Helper()
	if n.stock {
		host, port, _ := net.SplitHostPort(n.addr)
		p, _ := strconv.Atoi(port)
		srv, err := server.NewServer(&server.Options{JetStream: true, StoreDir: n.dir, Host: host, Port: p, NoSigs: true, NoLog: true})
		if err != nil {
			enginetest.Unavailable(n.t, "nats-server", err)
		}
		srv.Start()
		if !srv.ReadyForConnections(10 * time.Second) {
			enginetest.Unavailable(n.t, "nats-server", errors.New("not ready after 10s"))
		}
		n.srv = srv
		return
	}
	srv, err := natsbus.StartServer(n.dir, n.addr)
	if err != nil {
		enginetest.Unavailable(n.t, "embedded nats", err)
	}
	n.srv = srv
}

// Stop stops the server (the bus sees an outage).
func (n *Server) Stop() {
	if n.srv != nil {
		n.srv.Shutdown()
		n.srv.WaitForShutdown()
		n.srv = nil
	}
}

// URL is the server's client URL.
func (n *Server) URL() string { return "nats://" + n.addr }

// Open connects a bus to the server, as a separate process would.
func (n *Server) Open(t testing.TB) *natsbus.Bus {
	t.Helper()
	b, err := natsbus.Open(context.Background(), natsbus.Config{URL: n.URL(), StallWait: 2 * time.Second, AckTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

// Messages returns the msg ids and headers of every message on stream s.
func (n *Server) Messages(t testing.TB, s bus.Stream) []*nats.Msg {
	t.Helper()
	nc, err := nats.Connect(n.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	st, err := js.Stream(ctx, natsbus.StreamName(s))
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	total := info.State.Msgs
	var out []*nats.Msg
	if total == 0 {
		return nil
	}
	c, err := st.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	for uint64(len(out)) < total {
		batch, err := c.Fetch(int(min(total-uint64(len(out)), 5000)), jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		for m := range batch.Messages() {
			out = append(out, &nats.Msg{Subject: m.Subject(), Header: m.Headers(), Data: m.Data()})
		}
		if batch.Error() != nil {
			t.Fatal(batch.Error())
		}
	}
	return out
}

// Count is the number of messages on stream s.
func (n *Server) Count(t testing.TB, s bus.Stream) uint64 {
	t.Helper()
	nc, err := nats.Connect(n.URL())
	if err != nil {
		return 0
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return 0
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st, err := js.Stream(ctx, natsbus.StreamName(s))
	if err != nil {
		return 0
	}
	info, err := st.Info(ctx)
	if err != nil {
		return 0
	}
	return info.State.Msgs
}

// CheckExactlyOnce verifies the events stream holds want ids ("auditID/stage"), each once,
// under message ids "<cluster>/<auditID>/<stage>".
func CheckExactlyOnce(t testing.TB, msgs []*nats.Msg, want []string) {
	t.Helper()
	got := map[string]int{}
	for _, m := range msgs {
		id, cluster := m.Header.Get(jetstream.MsgIDHeader), m.Subject[strings.LastIndexByte(m.Subject, '.')+1:]
		if cluster == "" || !strings.HasPrefix(id, cluster+"/") {
			t.Fatalf("message id %q does not start with its cluster %q", id, cluster)
		}
		got[strings.TrimPrefix(id, cluster+"/")]++
	}
	if len(msgs) != len(want) || len(got) != len(want) {
		t.Errorf("stream holds %d messages with %d distinct ids, want %d", len(msgs), len(got), len(want))
	}
	bad := 0
	for i, id := range want {
		if got[id] != 1 {
			if bad++; bad <= 5 {
				t.Errorf("event %d (%s) stored %d times", i, id, got[id])
			}
		}
	}
	if bad > 5 {
		t.Errorf("... %d events stored other than once", bad)
	}
}
