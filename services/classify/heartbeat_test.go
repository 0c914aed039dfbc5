package classify

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/protobuf/proto"

	"github.com/auditlens/auditlens/lib/auditevent"
	"github.com/auditlens/auditlens/lib/bus"
	"github.com/auditlens/auditlens/lib/bus/eventbatch"
	"github.com/auditlens/auditlens/lib/bus/natsbus"
	"github.com/auditlens/auditlens/lib/daemon"
	"github.com/auditlens/auditlens/lib/kubeversion"
	"github.com/auditlens/auditlens/lib/testkit"
	auditlensv1 "github.com/auditlens/auditlens/proto/auditlens/v1"
	"github.com/auditlens/auditlens/services/classify/rules"
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
	svc, stop := startHeartbeating(t, b)

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
	stop()
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
	svc, stop := startHeartbeating(t, b)
	if err := b.Publish(context.Background(),
		bus.Message{Stream: bus.Events, Cluster: "prod", ID: "a", Data: eventAt("a", "2026-11-29T10:00:05Z", removedBody)},
		bus.Message{Stream: bus.Events, Cluster: "prod", ID: "b", Data: eventAt("b", "2026-11-29T10:00:06Z", apiserverBody("1.37.2"))}); err != nil {
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
	stop()
	ds := collect(t, b, bus.Findings, 2, 300*time.Millisecond)
	got, findings := heartbeatCounts(t, ds)
	minute := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
	if len(got) != 1 || len(got["prod"]) != 1 || got["prod"][minute] != 2 {
		t.Errorf("heartbeats %v, want prod 10:00 with 2 events", got)
	}
	if findings != 1 {
		t.Errorf("%d findings, want 1", findings)
	}
	// The sighting refused with its minutes comes once publishing works.
	if got, want := fmt.Sprint(sightingsIn(t, ds)), "map[prod kube-apiserver 1.37 10:00:1]"; got != want {
		t.Errorf("sightings %s, want %s", got, want)
	}
}

// apiserverBody is a request of the kube-apiserver of release v (its loopback client).
func apiserverBody(v string) string {
	return `"requestURI":"/api/v1/namespaces/default/endpoints/kubernetes","verb":"get","user":{"username":"system:apiserver"},` +
		`"userAgent":"kube-apiserver/v` + v + ` (linux/amd64) kubernetes/abc","objectRef":{"resource":"endpoints","namespace":"default","apiVersion":"v1"}`
}

// sightingsIn counts the control-plane sightings among the heartbeats of ds: how many
// messages carried each, as "cluster component version HH:MM" of its minute.
func sightingsIn(t *testing.T, ds []*bus.Delivery) map[string]int {
	t.Helper()
	out := map[string]int{}
	for _, d := range ds {
		if d.Header[auditlensv1.MessageTypeHeader] != auditlensv1.HeartbeatMessageType {
			continue
		}
		var hb auditlensv1.Heartbeat
		if err := proto.Unmarshal(d.Data, &hb); err != nil {
			t.Fatalf("heartbeat %s: %v", d.ID, err)
		}
		for _, s := range hb.ControlPlane {
			out[hb.Cluster+" "+s.Component+" "+s.Version+" "+s.Seen.AsTime().UTC().Format("15:04")]++
		}
	}
	return out
}

// TestHeartbeatsCarryTheControlPlane: the releases the control plane's components name in
// their user agents come in the heartbeats of their cluster, each release once per minute
// however many requests name it: a busy apiserver does not make every heartbeat carry it; a
// later minute sends it again; an agent sent by another identity, a kubelet and a cluster
// without control-plane requests send none.
func TestHeartbeatsCarryTheControlPlane(t *testing.T) {
	b := openNATS(t)
	svc, stop := startHeartbeating(t, b)

	cm := `"requestURI":"/apis/apps/v1/deployments","verb":"list","user":{"username":"system:serviceaccount:kube-system:deployment-controller"},` +
		`"userAgent":"kube-controller-manager/v1.36.1 (linux/amd64) kubernetes/abc/system:serviceaccount:kube-system:deployment-controller","objectRef":{"resource":"deployments","apiGroup":"apps","apiVersion":"v1"}`
	forged := `"requestURI":"/api/v1/pods","verb":"list","user":{"username":"alice"},"userAgent":"kube-apiserver/v1.99.0 (linux/amd64) kubernetes/abc","objectRef":{"resource":"pods","apiVersion":"v1"}`
	kubelet := `"requestURI":"/api/v1/nodes/n1","verb":"get","user":{"username":"system:node:n1"},"userAgent":"kubelet/v1.35.0 (linux/amd64) kubernetes/abc","objectRef":{"resource":"nodes","name":"n1","apiVersion":"v1"}`
	publish := func(msgs ...bus.Message) {
		t.Helper()
		if err := b.Publish(context.Background(), msgs...); err != nil {
			t.Fatal(err)
		}
	}
	// classified waits until n events are settled and their heartbeats published.
	classified := func(n uint64) {
		t.Helper()
		testkit.Eventually(t, 20*time.Second, fmt.Sprintf("%d events settled and sent", n), func() bool { return svc.beats.sent(n) })
	}
	var msgs []bus.Message
	for i, at := range []string{"10:00:05", "10:00:20", "10:00:40.5"} {
		id := fmt.Sprintf("api%d", i)
		msgs = append(msgs, bus.Message{Stream: bus.Events, Cluster: "prod", ID: id, Data: eventAt(id, "2026-11-29T"+at+"Z", apiserverBody("1.37.2"))})
	}
	msgs = append(msgs,
		bus.Message{Stream: bus.Events, Cluster: "prod", ID: "cm", Data: eventAt("cm", "2026-11-29T10:00:10Z", cm)},
		bus.Message{Stream: bus.Events, Cluster: "prod", ID: "forged", Data: eventAt("forged", "2026-11-29T10:00:30Z", forged)},
		bus.Message{Stream: bus.Events, Cluster: "quiet", ID: "kubelet", Data: eventAt("kubelet", "2026-11-29T10:00:30Z", kubelet)},
	)
	publish(msgs...)
	classified(6)
	// The busy apiserver again in the same minute: nothing new to send.
	publish(bus.Message{Stream: bus.Events, Cluster: "prod", ID: "api3", Data: eventAt("api3", "2026-11-29T10:00:59Z", apiserverBody("1.37.2"))})
	classified(7)
	// A later minute, and a rolling upgrade: the next release answers beside the old one (in
	// settles of their own: within one settle, the newest release of a component is kept).
	publish(bus.Message{Stream: bus.Events, Cluster: "prod", ID: "api5", Data: eventAt("api5", "2026-11-29T10:03:02Z", apiserverBody("1.38.0"))})
	classified(8)
	publish(bus.Message{Stream: bus.Events, Cluster: "prod", ID: "api4", Data: eventAt("api4", "2026-11-29T10:03:01Z", apiserverBody("1.37.2"))})
	classified(9)
	stop()
	got := sightingsIn(t, collect(t, b, bus.Findings, 3, 300*time.Millisecond))
	want := map[string]int{
		"prod kube-apiserver 1.37 10:00":          1,
		"prod kube-controller-manager 1.36 10:00": 1,
		"prod kube-apiserver 1.37 10:03":          1,
		"prod kube-apiserver 1.38 10:03":          1,
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("sightings (messages carrying each):\n got %v\nwant %v", got, want)
	}
}

// TestHeartbeatSightingsPending: a sighting is pending when it is new or seen in a later
// minute, not again in the same minute; a failed publish leaves it pending (in the same
// message); a cluster whose only news is a sighting gets a heartbeat of its own; old published
// sightings are forgotten, and a flood of releases is split into bounded messages.
func TestHeartbeatSightingsPending(t *testing.T) {
	h := newHeartbeats()
	now := time.Date(2026, 11, 29, 10, 5, 0, 0, time.UTC)
	api := func(v string, at time.Time) []kubeversion.Sighting {
		return []kubeversion.Sighting{{Component: "kube-apiserver", Version: kubeversion.MustParse(v), At: at}}
	}
	decode := func(msgs []bus.Message) []*auditlensv1.Heartbeat {
		t.Helper()
		var out []*auditlensv1.Heartbeat
		for _, m := range msgs {
			var hb auditlensv1.Heartbeat
			if err := proto.Unmarshal(m.Data, &hb); err != nil {
				t.Fatal(err)
			}
			out = append(out, &hb)
		}
		return out
	}
	h.sighted("prod", api("1.37", now.Add(-2*time.Minute+17*time.Second)), now)
	first, _, err := h.pending(now)
	if err != nil || len(first) != 1 {
		t.Fatalf("pending: %d messages, %v; want 1", len(first), err)
	}
	hb := decode(first)[0]
	if len(hb.Minutes) != 0 || len(hb.ControlPlane) != 1 || hb.Cluster != "prod" {
		t.Fatalf("heartbeat %v: want prod's sighting alone", hb)
	}
	if s := hb.ControlPlane[0]; s.Component != "kube-apiserver" || s.Version != "1.37" || !s.Seen.AsTime().Equal(now.Add(-2*time.Minute)) {
		t.Errorf("sighting %v: want kube-apiserver 1.37 at the minute %s", s, now.Add(-2*time.Minute))
	}
	again, done, _ := h.pending(now) // the first publish failed
	if len(again) != 1 || again[0].ID != first[0].ID {
		t.Fatalf("after a failed publish: %d messages, want the same one (id %s)", len(again), first[0].ID)
	}
	h.published(done)
	// The same minute again (a busy apiserver): nothing to send.
	h.sighted("prod", api("1.37", now.Add(-2*time.Minute+50*time.Second)), now)
	if msgs, _, _ := h.pending(now); len(msgs) != 0 {
		t.Fatalf("%d messages for a sighting of a minute already sent, want none", len(msgs))
	}
	// A later minute: sent again, with that minute.
	h.sighted("prod", api("1.37", now.Add(-time.Minute)), now)
	msgs, done, _ := h.pending(now)
	if len(msgs) != 1 || !decode(msgs)[0].ControlPlane[0].Seen.AsTime().Equal(now.Add(-time.Minute)) {
		t.Fatalf("after a later minute: %v, want one message with the minute %s", msgs, now.Add(-time.Minute))
	}
	// A minute that changes while its message is in flight stays pending.
	h.sighted("prod", api("1.37", now), now)
	h.published(done)
	if msgs, _, _ := h.pending(now); len(msgs) != 1 {
		t.Fatalf("%d messages for a minute seen during a publish, want 1", len(msgs))
	}
	// Published and untouched for longer than heartbeatKeep: forgotten.
	_, done, _ = h.pending(now)
	h.published(done)
	_, _, _ = h.pending(now.Add(heartbeatKeep + time.Minute))
	if len(h.planes) != 0 || len(h.clusters) != 0 {
		t.Errorf("old published sightings kept: %v", h.planes)
	}
	// A flood of forged releases: every message bounded, each release sent once.
	var flood []kubeversion.Sighting
	for minor := range 3 * heartbeatSightingsPerMessage / 2 {
		flood = append(flood, kubeversion.Sighting{Component: "kube-scheduler", Version: kubeversion.Version{Major: 1, Minor: minor}, At: now})
	}
	h.sighted("prod", flood, now)
	h.add(map[string]map[int64]uint64{"prod": {now.Unix(): 3}}, now)
	msgs, _, _ = h.pending(now)
	versions, minutes := map[string]bool{}, 0
	for _, hb := range decode(msgs) {
		if len(hb.ControlPlane) > heartbeatSightingsPerMessage {
			t.Errorf("a heartbeat of %d sightings, want at most %d", len(hb.ControlPlane), heartbeatSightingsPerMessage)
		}
		for _, s := range hb.ControlPlane {
			versions[s.Version] = true
		}
		minutes += len(hb.Minutes)
	}
	if len(msgs) != 2 || len(versions) != len(flood) || minutes != 1 {
		t.Errorf("%d messages of %d releases and %d minutes, want 2 of %d and 1", len(msgs), len(versions), minutes, len(flood))
	}
}

// sent reports whether h counted at least n events and published everything it holds.
func (h *heartbeats) sent(n uint64) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	var events uint64
	for _, c := range h.clusters {
		for _, mc := range c {
			if mc.dirty {
				return false
			}
			events += mc.events
		}
	}
	for _, p := range h.planes {
		for _, sg := range p {
			if sg.dirty() {
				return false
			}
		}
	}
	for _, c := range h.moves {
		for _, mv := range c {
			if mv.dirty() {
				return false
			}
		}
	}
	return events >= n
}

// TestHeartbeatsCarryTheCoverage: the kinds of events a cluster sent (the input of each
// message, the managed envelope's cloud, the audit level, and for the writes a request-body
// rule reads whether the body was logged) reach report in the heartbeats, each with its
// newest minute and sent once per minute.
func TestHeartbeatsCarryTheCoverage(t *testing.T) {
	b := openNATS(t)
	svc, stop := startHeartbeating(t, b)
	read := `"requestURI":"/api/v1/pods","verb":"list","user":{"username":"alice"},"objectRef":{"resource":"pods","apiVersion":"v1"}`
	write := `"requestURI":"/api/v1/namespaces/a/pods","verb":"create","user":{"username":"alice"},"objectRef":{"resource":"pods","namespace":"a","apiVersion":"v1"}`
	withBody := strings.Replace(write, `"verb"`, `"requestObject":{"kind":"Pod"},"verb"`, 1)
	eks := read + `,"annotations":{"auditlens.io/envelope":"eks/cloudwatch-subscription"}`
	msg := func(id, input, at, body string) bus.Message {
		return bus.Message{Stream: bus.Events, Cluster: "prod", ID: id, Data: eventAt(id, "2026-11-29T"+at+"Z", body),
			Header: map[string]string{bus.HeaderInput: input}}
	}
	requestLevel := func(data []byte) []byte {
		return []byte(strings.Replace(string(data), `"level":"Metadata"`, `"level":"Request"`, 1))
	}
	w := msg("w2", "webhook", "10:02:00", withBody)
	w.Data = requestLevel(w.Data)
	if err := b.Publish(context.Background(),
		msg("r1", "file", "10:00:05", read), msg("r2", "file", "10:00:50", read),
		msg("w1", "file", "10:01:00", write), w,
		msg("e1", "firehose", "10:03:00", eks),
		bus.Message{Stream: bus.Events, Cluster: "prod", ID: "old", Data: eventAt("old", "2026-11-29T10:04:00Z", read)},
	); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 20*time.Second, "6 events settled and sent", func() bool { return svc.beats.sent(6) })
	stop()
	got := map[string]int{}
	for _, c := range coverageIn(t, collect(t, b, bus.Findings, 1, 300*time.Millisecond)) {
		got[fmt.Sprintf("%s|%s|%s|%s", c.Input, c.Level, c.Writes, c.Seen.AsTime().Format("15:04"))]++
	}
	want := map[string]int{
		"file|Metadata||10:00":         1,
		"file|Metadata|no-body|10:01":  1,
		"webhook|Request|body|10:02":   1,
		"firehose eks|Metadata||10:03": 1,
		"unknown|Metadata||10:04":      1,
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("coverage (messages carrying each):\n got %v\nwant %v", got, want)
	}
}

// startHeartbeating runs a one-worker service sending heartbeats every 50ms on b; stop ends it
// (its last heartbeats sent) and fails t when Run failed.
func startHeartbeating(t *testing.T, b bus.Bus) (svc *service, stop func()) {
	t.Helper()
	svc, err := newService(configWith(func(c *Config) {
		c.Workers, c.BatchWait, c.HeartbeatInterval = 1, 5*time.Millisecond, 50*time.Millisecond
	}), daemon.Deps{Bus: b, Cluster: "default", Registry: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	runErr := make(chan error, 1)
	go func() { runErr <- svc.Run(ctx) }()
	return svc, func() {
		t.Helper()
		cancel()
		if err := <-runErr; err != nil {
			t.Fatal(err)
		}
	}
}

// TestCoverageOfEventBatches: events in EventBatch messages (their bytes reused for the next
// batch) keep their kinds intact: the keys the heartbeats hold own their strings. Before they
// did, a reused buffer changed a kept key under its map and the next heartbeat panicked.
func TestCoverageOfEventBatches(t *testing.T) {
	b := openNATS(t)
	svc, stop := startHeartbeating(t, b)
	level := func(data []byte, l string) []byte {
		return []byte(strings.Replace(string(data), `"level":"Metadata"`, `"level":"`+l+`"`, 1))
	}
	var msgs []bus.Message
	for i, l := range []string{"RequestResponse", "Metadata", "Request", "Metadata", "RequestResponse", "Request"} {
		p := eventbatch.NewPacker(eventbatch.DefaultConfig(), "prod", fmt.Sprintf("prod/file/b%d", i), eventbatch.ByRange,
			map[string]string{bus.HeaderInput: []string{"file", "webhook"}[i%2]})
		var batch []bus.Message
		for j := range 5 {
			id := fmt.Sprintf("b%d-%d", i, j)
			batch = p.Add(batch, level(eventAt(id, fmt.Sprintf("2026-11-29T10:%02d:00Z", i), cleanBody), l), fmt.Sprint(j))
		}
		msgs = append(msgs, p.Flush(batch)...)
	}
	// One batch per settle: each settle's buffers are the next one's.
	for i, m := range msgs {
		if err := b.Publish(context.Background(), m); err != nil {
			t.Fatal(err)
		}
		n := uint64(5 * (i + 1))
		testkit.Eventually(t, 20*time.Second, fmt.Sprintf("%d events settled and sent", n), func() bool { return svc.beats.sent(n) })
	}
	stop()
	got := map[string]bool{}
	for _, c := range coverageIn(t, collect(t, b, bus.Findings, 1, 300*time.Millisecond)) {
		got[c.Input+"|"+c.Level] = true
	}
	want := map[string]bool{"file|RequestResponse": true, "webhook|Metadata": true, "file|Request": true, "webhook|Request": true}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("kinds %v, want %v", got, want)
	}
}

// TestCoverageKeysOwnTheirStrings: the kind kept of an event does not change when the bytes
// it was decoded from are overwritten (the decoder's strings point into them; a batch's
// buffer is the next batch's), whatever its level.
func TestCoverageKeysOwnTheirStrings(t *testing.T) {
	for _, l := range []string{"RequestResponse", "SomeFutureLevel"} {
		buf := []byte(strings.Replace(string(eventAt("k1", "2026-11-29T10:00:00Z", cleanBody)), `"level":"Metadata"`, `"level":"`+l+`"`, 1))
		ev, err := auditevent.NewDecoder(0).DecodeEvent(buf)
		if err != nil {
			t.Fatal(err)
		}
		input := []byte("webhook")
		p := &clusterPlane{}
		p.observe(ev, &bus.Delivery{Message: bus.Message{Header: map[string]string{bus.HeaderInput: string(input)}}}, ev.EventTime(), rules.Move{})
		for i := range buf {
			buf[i] = 'x'
		}
		for k := range p.kinds {
			if k.level != l || k.input != "webhook" {
				t.Errorf("kept kind %+v after its bytes were overwritten, want level %s from webhook", k, l)
			}
		}
		if len(p.kinds) != 1 {
			t.Errorf("%d kinds, want 1", len(p.kinds))
		}
	}
}

// coverageIn is every coverage sighting of the Heartbeat messages among ds, in order.
func coverageIn(t *testing.T, ds []*bus.Delivery) []*auditlensv1.CoverageSighting {
	t.Helper()
	var out []*auditlensv1.CoverageSighting
	for _, d := range ds {
		if d.Header[auditlensv1.MessageTypeHeader] != auditlensv1.HeartbeatMessageType {
			continue
		}
		var hb auditlensv1.Heartbeat
		if err := proto.Unmarshal(d.Data, &hb); err != nil {
			t.Fatal(err)
		}
		out = append(out, hb.Coverage...)
	}
	return out
}

// TestCoverageKeptPerDay: one kind of event seen on two days is sent for each, with that day's
// newest minute, so that a window weeks back (an imported log's) finds its own day's.
func TestCoverageKeptPerDay(t *testing.T) {
	h := newHeartbeats()
	p := &clusterPlane{}
	for _, at := range []string{"2026-11-28T09:00:00Z", "2026-11-28T23:59:00Z", "2026-11-29T00:01:00Z"} {
		ev, err := auditevent.NewDecoder(0).DecodeEvent(eventAt("d", at, `"requestURI":"/api/v1/pods","verb":"list","user":{"username":"a"},"objectRef":{"resource":"pods","apiVersion":"v1"}`))
		if err != nil {
			t.Fatal(err)
		}
		p.observe(ev, &bus.Delivery{Message: bus.Message{Header: map[string]string{bus.HeaderInput: "file"}}}, ev.EventTime(), rules.Move{})
	}
	now := time.Date(2026, 11, 29, 1, 0, 0, 0, time.UTC)
	h.covered("prod", p.kinds, now)
	msgs, _, err := h.pending(now)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, m := range msgs {
		var hb auditlensv1.Heartbeat
		if err := proto.Unmarshal(m.Data, &hb); err != nil {
			t.Fatal(err)
		}
		for _, c := range hb.Coverage {
			got = append(got, c.Input+" "+c.Level+" "+c.Seen.AsTime().Format(time.RFC3339))
		}
	}
	if want := "[file Metadata 2026-11-28T23:59:00Z file Metadata 2026-11-29T00:01:00Z]"; fmt.Sprint(got) != want {
		t.Errorf("coverage %v, want %s", got, want)
	}
}
