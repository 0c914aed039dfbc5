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

	"github.com/auditlens/auditlens/lib/auditevent"
	"github.com/auditlens/auditlens/lib/bus"
	"github.com/auditlens/auditlens/lib/bus/eventbatch"
	"github.com/auditlens/auditlens/lib/bus/natsbus"
	"github.com/auditlens/auditlens/lib/enginetest"
	"github.com/auditlens/auditlens/lib/testkit"
)

// Server is an embedded JetStream server reachable over TCP, restartable on the same
// store and port.
type Server struct {
	t    testing.TB
	dir  string
	addr string
	srv  *server.Server
	// maxPayload > 0: a server as shipped (nats-server's defaults) with this max payload,
	// not the embedded server (8 MiB).
	maxPayload int32
}

// FreeAddr is a local TCP address nothing listens on.
func FreeAddr(t testing.TB) string { return enginetest.FreeAddr(t) }

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
	return StartMaxPayload(t, 1<<20)
}

// StartMaxPayload starts a JetStream server with nats-server's defaults but a max payload of
// size bytes.
func StartMaxPayload(t testing.TB, size int32) *Server {
	t.Helper()
	n := &Server{t: t, dir: t.TempDir(), addr: FreeAddr(t), maxPayload: size}
	n.Start()
	t.Cleanup(n.Stop)
	return n
}

// Start starts the server again, on the same store and port.
func (n *Server) Start() {
	n.t.Helper()
	if n.maxPayload > 0 {
		host, port, _ := net.SplitHostPort(n.addr)
		p, _ := strconv.Atoi(port)
		srv, err := server.NewServer(&server.Options{JetStream: true, StoreDir: n.dir, Host: host, Port: p, MaxPayload: n.maxPayload, NoSigs: true, NoLog: true})
		if err != nil {
			enginetest.Unavailable(n.t, "nats-server", err)
		}
		srv.Start()
		if !srv.ReadyForConnections(testkit.Bound(10 * time.Second)) {
			enginetest.Unavailable(n.t, "nats-server", errors.New("not ready in time"))
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

// Messages returns the msg ids and headers of every message on stream s. An EventBatch on
// the events stream is returned as its events, one message each, under the id the event has
// alone ("<cluster>/<auditID>/<stage>", Nats-Msg-Id) with the batch's headers (its own id in
// HeaderBatchID): tests check events whether they travel alone or in batches.
func (n *Server) Messages(t testing.TB, s bus.Stream) []*nats.Msg {
	t.Helper()
	msgs := n.messages(t, s)
	if s != bus.Events {
		return msgs
	}
	var out []*nats.Msg
	for _, m := range msgs {
		h := map[string]string{}
		for k := range m.Header {
			h[k] = m.Header.Get(k)
		}
		if !eventbatch.IsBatch(h) {
			out = append(out, m)
			continue
		}
		evs, _, err := eventbatch.Events(h, m.Data, nil, nil)
		if err != nil {
			t.Fatalf("batch %s: %v", m.Header.Get(jetstream.MsgIDHeader), err)
		}
		cluster := m.Subject[strings.LastIndexByte(m.Subject, '.')+1:]
		if c := m.Header.Get(bus.HeaderCluster); c != "" {
			cluster = c // a name that is no subject token (bus.ClusterToken)
		}
		for _, ev := range evs {
			ref, err := auditevent.Peek(ev, 0)
			if err != nil {
				t.Fatalf("event in batch %s: %v", m.Header.Get(jetstream.MsgIDHeader), err)
			}
			hdr := nats.Header{}
			for k, v := range m.Header {
				hdr[k] = v
			}
			hdr.Set(HeaderBatchID, m.Header.Get(jetstream.MsgIDHeader))
			hdr.Set(jetstream.MsgIDHeader, bus.EventID(cluster, ref.AuditID+"/"+ref.Stage))
			out = append(out, &nats.Msg{Subject: m.Subject, Header: hdr, Data: ev})
		}
	}
	return out
}

// IDs counts the message ids of the events on stream s, "<subject> <id>" (events of a batch
// under their own ids, as Messages gives them), and returns the total; empty while the
// stream is not there yet, for polling.
func (n *Server) IDs(t testing.TB, s bus.Stream) (map[string]int, int) {
	t.Helper()
	out := map[string]int{}
	if n.count(t, s) == 0 {
		return out, 0
	}
	msgs := n.Messages(t, s)
	for _, m := range msgs {
		out[m.Subject+" "+m.Header.Get(jetstream.MsgIDHeader)]++
	}
	return out, len(msgs)
}

// HeaderBatchID is set by Messages on an event that came in a batch: the batch's id.
const HeaderBatchID = "Test-Batch-Id"

// messages returns every message on stream s as stored.
func (n *Server) messages(t testing.TB, s bus.Stream) []*nats.Msg {
	t.Helper()
	msgs, err := n.read(s, 60*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	return msgs
}

// read returns every message on stream s as stored.
func (n *Server) read(s bus.Stream, timeout time.Duration) ([]*nats.Msg, error) {
	nc, err := nats.Connect(n.URL())
	if err != nil {
		return nil, err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	st, err := js.Stream(ctx, natsbus.StreamName(s))
	if err != nil {
		return nil, err
	}
	info, err := st.Info(ctx)
	if err != nil {
		return nil, err
	}
	total := info.State.Msgs
	var out []*nats.Msg
	if total == 0 {
		return nil, nil
	}
	c, err := st.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
	if err != nil {
		return nil, err
	}
	for uint64(len(out)) < total {
		batch, err := c.Fetch(int(min(total-uint64(len(out)), 5000)), jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			return nil, err
		}
		for m := range batch.Messages() {
			out = append(out, &nats.Msg{Subject: m.Subject(), Header: m.Headers(), Data: m.Data()})
		}
		if batch.Error() != nil {
			return nil, batch.Error()
		}
	}
	return out, nil
}

// Count is the number of messages on stream s; on the events stream, of events (a batch
// counts the events it holds).
func (n *Server) Count(t testing.TB, s bus.Stream) uint64 {
	t.Helper()
	if s == bus.Events && n.count(t, s) > 0 {
		msgs, err := n.read(s, 10*time.Second)
		if err != nil {
			return 0
		}
		var events uint64
		for _, m := range msgs {
			h := map[string]string{}
			for k := range m.Header {
				h[k] = m.Header.Get(k)
			}
			events += uint64(eventbatch.Count(h))
		}
		return events
	}
	return n.count(t, s)
}

// Stored is the number of messages stream s stores (a batch is one).
func (n *Server) Stored(t testing.TB, s bus.Stream) uint64 {
	t.Helper()
	return n.count(t, s)
}

// count is the number of messages on stream s.
func (n *Server) count(t testing.TB, s bus.Stream) uint64 {
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
