package classify

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/protobuf/proto"

	"github.com/auditlens/auditlens/lib/bus"
	"github.com/auditlens/auditlens/lib/bus/natsbus"
	"github.com/auditlens/auditlens/lib/daemon"
	"github.com/auditlens/auditlens/lib/testkit"
	auditlensv1 "github.com/auditlens/auditlens/proto/auditlens/v1"
)

// eventAt is an audit event received at t (RFC 3339).
func eventAt(auditID, t, body string) []byte {
	return []byte(`{"kind":"Event","apiVersion":"audit.k8s.io/v1","level":"Metadata","auditID":"` + auditID +
		`","stage":"ResponseComplete","requestReceivedTimestamp":"` + t + `","stageTimestamp":"` + t + `",` + body + `}`)
}

// heartbeatCounts reads the Heartbeat messages among ds: the largest count per cluster and
// minute (as report keeps them), and the number of findings in the other messages.
func heartbeatCounts(t *testing.T, ds []*bus.Delivery) (map[string]map[time.Time]uint64, int) {
	t.Helper()
	out := map[string]map[time.Time]uint64{}
	findings := 0
	for _, d := range ds {
		if d.Header[auditlensv1.MessageTypeHeader] != auditlensv1.HeartbeatMessageType {
			findings += len(findingsIn(t, []*bus.Delivery{d}))
			continue
		}
		var hb auditlensv1.Heartbeat
		if err := proto.Unmarshal(d.Data, &hb); err != nil {
			t.Fatalf("heartbeat %s: %v", d.ID, err)
		}
		if d.Cluster != hb.Cluster {
			t.Errorf("heartbeat of %q published on the subject of %q", hb.Cluster, d.Cluster)
		}
		if out[hb.Cluster] == nil {
			out[hb.Cluster] = map[time.Time]uint64{}
		}
		for _, m := range hb.Minutes {
			at := m.Minute.AsTime()
			out[hb.Cluster][at] = max(out[hb.Cluster][at], m.Events)
		}
	}
	return out, findings
}

// TestHeartbeatsCountTheMinutesOfEvents: events with and without findings, in two clusters and
// three minutes, come out as heartbeats per cluster and minute of event time with their counts,
// beside the same findings as without heartbeats; an undecodable event counts nowhere.
func TestHeartbeatsCountTheMinutesOfEvents(t *testing.T) {
	b := openNATS(t)
	reg := prometheus.NewRegistry()
	svc, err := newService(configWith(func(c *Config) {
		c.Workers, c.BatchWait, c.HeartbeatInterval = 1, 5*time.Millisecond, 50*time.Millisecond
	}), daemon.Deps{Bus: b, Cluster: "default", Registry: reg})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	runErr := make(chan error, 1)
	go func() { runErr <- svc.Run(ctx) }()

	msgs := []bus.Message{
		{Stream: bus.Events, Cluster: "prod", ID: "a", Data: eventAt("a", "2026-11-29T10:00:05.5Z", removedBody)},
		{Stream: bus.Events, Cluster: "prod", ID: "b", Data: eventAt("b", "2026-11-29T10:00:59.999Z", cleanBody)},
		{Stream: bus.Events, Cluster: "prod", ID: "c", Data: eventAt("c", "2026-11-29T10:02:00Z", cleanBody)},
		{Stream: bus.Events, Cluster: "quiet", ID: "d", Data: eventAt("d", "2026-11-29T10:01:30Z", cleanBody)},
		{Stream: bus.Events, Cluster: "quiet", ID: "e", Data: eventAt("e", "2026-11-29T10:01:31Z", cleanBody)},
		{Stream: bus.Events, Cluster: "quiet", ID: "bad", Data: []byte(`{"not":"an event"`)},
	}
	if err := b.Publish(context.Background(), msgs...); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 20*time.Second, "heartbeats published", func() bool {
		return testutil.ToFloat64(svc.met.heartbeats) >= 2
	})
	// Later events of a minute already published raise its count.
	if err := b.Publish(context.Background(), bus.Message{Stream: bus.Events, Cluster: "prod", ID: "f", Data: eventAt("f", "2026-11-29T10:00:30Z", cleanBody)}); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 20*time.Second, "the later event classified", func() bool {
		return testutil.ToFloat64(svc.met.events.WithLabelValues("ok")) >= 6
	})
	cancel()
	if err := <-runErr; err != nil {
		t.Fatal(err)
	}
	got, findings := heartbeatCounts(t, collect(t, b, bus.Findings, 1, 300*time.Millisecond))
	minute := func(s string) time.Time { tm, _ := time.Parse(time.RFC3339, s); return tm }
	want := map[string]map[time.Time]uint64{
		"prod":  {minute("2026-11-29T10:00:00Z"): 3, minute("2026-11-29T10:02:00Z"): 1},
		"quiet": {minute("2026-11-29T10:01:00Z"): 2},
	}
	for cluster, ms := range want {
		for m, n := range ms {
			if got[cluster][m] != n {
				t.Errorf("%s %s: %d events, want %d", cluster, m.Format(time.RFC3339), got[cluster][m], n)
			}
		}
		if len(got[cluster]) != len(ms) {
			t.Errorf("%s: minutes %v, want %v", cluster, got[cluster], ms)
		}
	}
	if len(got) != len(want) {
		t.Errorf("clusters %v, want %v", got, want)
	}
	if findings != 1 {
		t.Errorf("%d findings beside the heartbeats, want 1 (the removed API)", findings)
	}
	if n := testutil.ToFloat64(svc.met.heartbeatErrors); n != 0 {
		t.Errorf("%v failed heartbeat publishes", n)
	}
}

// TestHeartbeatFailedPublishIsRepeated: minutes whose publish failed stay pending and come
// again in the same message (same id: the bus drops a copy that did arrive); once published
// they are not sent again until they change.
func TestHeartbeatFailedPublishIsRepeated(t *testing.T) {
	h := newHeartbeats()
	now := time.Date(2026, 11, 29, 10, 5, 0, 0, time.UTC)
	m := now.Add(-3 * time.Minute).Unix()
	h.add(map[string]map[int64]uint64{"prod": {m: 2}}, now)
	first, _, err := h.pending(now)
	if err != nil || len(first) != 1 {
		t.Fatalf("pending: %d messages, %v", len(first), err)
	}
	again, done, err := h.pending(now) // the first publish failed: nothing marked
	if err != nil || len(again) != 1 || again[0].ID != first[0].ID {
		t.Fatalf("after a failed publish: %v %v, want the same message id %s", again, err, first[0].ID)
	}
	h.published(done)
	if msgs, _, _ := h.pending(now); len(msgs) != 0 {
		t.Fatalf("%d messages after a successful publish, want none", len(msgs))
	}
	h.add(map[string]map[int64]uint64{"prod": {m: 1}}, now)
	msgs, _, _ := h.pending(now)
	if len(msgs) != 1 || msgs[0].ID == first[0].ID {
		t.Fatalf("after a change: %d messages (id %v), want one with a new id", len(msgs), msgs)
	}
	var hb auditlensv1.Heartbeat
	if err := proto.Unmarshal(msgs[0].Data, &hb); err != nil {
		t.Fatal(err)
	}
	if len(hb.Minutes) != 1 || hb.Minutes[0].Events != 3 {
		t.Fatalf("heartbeat %v: want the running count 3", &hb)
	}
	// Published and untouched for longer than heartbeatKeep: forgotten.
	h.published(nil)
	_, done, _ = h.pending(now)
	h.published(done)
	_, _, _ = h.pending(now.Add(heartbeatKeep + time.Minute))
	if len(h.clusters) != 0 {
		t.Errorf("old published minutes kept: %v", h.clusters)
	}
}

// heartbeatOutage is the embedded bus with heartbeats refused while down is set: the
// findings stream itself stays up.
type heartbeatOutage struct {
	*natsbus.Bus
	down atomic.Bool
}

func (b *heartbeatOutage) Publish(ctx context.Context, msgs ...bus.Message) error {
	if b.down.Load() {
		for _, m := range msgs {
			if m.Header[auditlensv1.MessageTypeHeader] == auditlensv1.HeartbeatMessageType {
				return errors.New("heartbeats refused (test)")
			}
		}
	}
	return b.Bus.Publish(ctx, msgs...)
}

// TestHeartbeatPublishFailureIsBestEffort: while heartbeats cannot be published, events are
// classified, their findings published and the events acknowledged all the same; the failures
// are counted, and once publishing works again the next heartbeat carries the minutes, counted
// once.
func TestHeartbeatPublishFailureIsBestEffort(t *testing.T) {
	b := &heartbeatOutage{Bus: openNATS(t)}
	b.down.Store(true)
	svc, err := newService(configWith(func(c *Config) {
		c.Workers, c.BatchWait, c.HeartbeatInterval = 1, 5*time.Millisecond, 50*time.Millisecond
	}), daemon.Deps{Bus: b, Cluster: "default", Registry: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	runErr := make(chan error, 1)
	go func() { runErr <- svc.Run(ctx) }()
	if err := b.Publish(context.Background(),
		bus.Message{Stream: bus.Events, Cluster: "prod", ID: "a", Data: eventAt("a", "2026-11-29T10:00:05Z", removedBody)},
		bus.Message{Stream: bus.Events, Cluster: "prod", ID: "b", Data: eventAt("b", "2026-11-29T10:00:06Z", cleanBody)}); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 20*time.Second, "failed heartbeats counted", func() bool { return testutil.ToFloat64(svc.met.heartbeatErrors) >= 2 })
	testkit.Eventually(t, 20*time.Second, "the events acknowledged meanwhile", func() bool {
		n, err := b.Backlog(context.Background(), bus.Events, svc.cfg.Group)
		return err == nil && n == 0
	})
	if n := testutil.ToFloat64(svc.met.heartbeats); n != 0 {
		t.Fatalf("%v heartbeats published while refused", n)
	}
	b.down.Store(false)
	testkit.Eventually(t, 20*time.Second, "a heartbeat once publishing works", func() bool { return testutil.ToFloat64(svc.met.heartbeats) >= 1 })
	cancel()
	if err := <-runErr; err != nil {
		t.Fatal(err)
	}
	got, findings := heartbeatCounts(t, collect(t, b, bus.Findings, 2, 300*time.Millisecond))
	minute := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
	if len(got) != 1 || len(got["prod"]) != 1 || got["prod"][minute] != 2 {
		t.Errorf("heartbeats %v, want prod 10:00 with 2 events", got)
	}
	if findings != 1 {
		t.Errorf("%d findings, want 1", findings)
	}
}
