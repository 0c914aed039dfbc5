package classify

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/auditlens/auditlens/lib/auditevent"
	"github.com/auditlens/auditlens/lib/bus"
	"github.com/auditlens/auditlens/lib/testkit"
	auditlensv1 "github.com/auditlens/auditlens/proto/auditlens/v1"
	"github.com/auditlens/auditlens/services/classify/rules"
)

// TestHeartbeatMovesPending: a caller's successor call is sent when it is the first this
// process keeps, the first after an old call, or an hour or a day after the last one sent;
// not for every call; a caller that only calls the old version sends nothing.
func TestHeartbeatMovesPending(t *testing.T) {
	h := newHeartbeats()
	api := rules.API{Group: "resource.k8s.io", Version: "v1beta1", Resource: "deviceclasses"}
	k := moveKey{API: api, User: "system:serviceaccount:dra:driver", Agent: "driver/v0.3"}
	t0 := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
	sends := func(at time.Time) []string {
		t.Helper()
		msgs, done, err := h.pending(at)
		if err != nil {
			t.Fatal(err)
		}
		h.published(done)
		var out []string
		for _, m := range msgs {
			var hb auditlensv1.Heartbeat
			if err := proto.Unmarshal(m.Data, &hb); err != nil {
				t.Fatal(err)
			}
			for _, s := range hb.Migrations {
				out = append(out, fmt.Sprintf("%s/%s %s %s %s %s", s.ApiGroup, s.ApiVersion, s.Resource, s.Username, s.UserAgent, s.Seen.AsTime().Format("15:04:05")))
			}
		}
		return out
	}
	call := func(at time.Time, old bool) {
		o := moveObs{newest: at.Unix()}
		if old {
			o = moveObs{lastOld: at.Unix()}
		}
		h.moved("prod", map[moveKey]*moveObs{k: &o}, at)
	}
	call(t0, true)
	if got := sends(t0); len(got) != 0 {
		t.Errorf("a caller of the old version only: sent %v", got)
	}
	call(t0.Add(5*time.Second), false)
	if got := sends(t0.Add(5 * time.Second)); fmt.Sprint(got) != "[resource.k8s.io/v1beta1 deviceclasses system:serviceaccount:dra:driver driver/v0.3 10:00:05]" {
		t.Errorf("the first successor call: sent %v", got)
	}
	call(t0.Add(time.Minute), false)
	if got := sends(t0.Add(time.Minute)); len(got) != 0 {
		t.Errorf("another successor call: sent %v", got)
	}
	// An old call, then the successor again: the move is sent at once.
	call(t0.Add(2*time.Minute), true)
	call(t0.Add(2*time.Minute+time.Second), false)
	if got := sends(t0.Add(2 * time.Minute)); len(got) != 1 || !strings.HasSuffix(got[0], "10:02:01") {
		t.Errorf("a successor call after an old one: sent %v", got)
	}
	// An old call in the same second as the last successor call sent: the next one is sent.
	call(t0.Add(2*time.Minute+time.Second), true)
	call(t0.Add(2*time.Minute+2*time.Second), false)
	if got := sends(t0.Add(2 * time.Minute)); len(got) != 1 || !strings.HasSuffix(got[0], "10:02:02") {
		t.Errorf("a successor call after an old one in the same second: sent %v", got)
	}
	// Every few minutes: once an hour.
	for m := 5; m <= 62; m += 5 {
		at := t0.Add(time.Duration(m) * time.Minute)
		call(at, false)
		got := sends(at)
		if want := at.Sub(t0.Add(2*time.Minute+2*time.Second)) >= time.Hour; want != (len(got) == 1) {
			t.Errorf("a successor call at %s: sent %v", at.Format("15:04"), got)
		}
	}
	// A new day.
	late := time.Date(2026, 11, 29, 23, 59, 0, 0, time.UTC)
	call(late, false)
	sends(late)
	next := late.Add(2 * time.Minute)
	call(next, false)
	if got := sends(next); len(got) != 1 {
		t.Errorf("the first successor call of a day: sent %v", got)
	}
	// Forgotten once published and untouched for heartbeatKeep.
	sends(next.Add(heartbeatKeep + time.Minute))
	if len(h.moves) != 0 {
		t.Errorf("callers kept: %v", h.moves)
	}
	// A caller that lists the old version and writes the successor has not moved its reads:
	// nothing is sent until it reads the successor after its last list.
	t1 := next.Add(time.Hour)
	h.moved("prod", map[moveKey]*moveObs{k: {lastOld: t1.Unix(), oldKinds: readCall}}, t1)
	h.moved("prod", map[moveKey]*moveObs{k: {newest: t1.Unix() + 5, newKinds: writeCall}}, t1)
	if got := sends(t1); len(got) != 0 {
		t.Errorf("a write of the successor after a read of the old version: sent %v", got)
	}
	h.moved("prod", map[moveKey]*moveObs{k: {newest: t1.Unix() + 9, newestRead: t1.Unix() + 9, newKinds: readCall}}, t1)
	if got := sends(t1); len(got) != 1 || !strings.HasSuffix(got[0], t1.Add(9*time.Second).Format(time.TimeOnly)) {
		t.Errorf("a read of the successor after it: sent %v", got)
	}
	// In one settle: the successor's read before the old read covers nothing.
	t2 := t1.Add(time.Minute)
	h.moved("prod", map[moveKey]*moveObs{k: {newest: t2.Unix(), lastOld: t2.Unix() + 1, oldKinds: readCall}}, t2)
	if got := sends(t2); len(got) != 0 {
		t.Errorf("a settle ending with an old read: sent %v", got)
	}
}

// TestHeartbeatsCarryTheMoves: through embedded NATS, a caller of resource.k8s.io/v1beta1
// deviceclasses that then lists resource.k8s.io/v1 is a migration sighting at its v1 call, to
// the second, for each API v1 deviceclasses replaces (the first successor call of a caller is
// sent whole: this process may not have seen its old calls); a refused v1 call moves nothing.
func TestHeartbeatsCarryTheMoves(t *testing.T) {
	b := openNATS(t)
	svc, stop := startHeartbeating(t, b)
	call := func(id, at, user, version string, code int) bus.Message {
		body := fmt.Sprintf(`"requestURI":"/apis/resource.k8s.io/%s/deviceclasses","verb":"list","user":{"username":%q},"userAgent":"driver/v0.3",`+
			`"objectRef":{"resource":"deviceclasses","apiGroup":"resource.k8s.io","apiVersion":%q},"responseStatus":{"code":%d}`, version, user, version, code)
		return bus.Message{Stream: bus.Events, Cluster: "prod", ID: id, Data: eventAt(id, "2026-11-29T"+at+"Z", body)}
	}
	if err := b.Publish(context.Background(),
		call("1", "10:00:00", "alice", "v1beta1", 200),
		call("2", "10:00:07", "alice", "v1", 200),
		call("3", "10:00:09", "bob", "v1", 403),
	); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 20*time.Second, "3 events settled and sent", func() bool { return svc.beats.sent(3) })
	stop()
	var got []string
	for _, d := range collect(t, b, bus.Findings, 1, 300*time.Millisecond) {
		if d.Header[auditlensv1.MessageTypeHeader] != auditlensv1.HeartbeatMessageType {
			continue
		}
		var hb auditlensv1.Heartbeat
		if err := proto.Unmarshal(d.Data, &hb); err != nil {
			t.Fatal(err)
		}
		if hb.ReviewedThrough != newestTarget(t) {
			t.Errorf("a heartbeat reviewed through %q, want the embedded catalogue's newest target %s", hb.ReviewedThrough, newestTarget(t))
		}
		for _, s := range hb.Migrations {
			got = append(got, fmt.Sprintf("%s %s/%s %s %s %s", hb.Cluster, s.ApiGroup, s.ApiVersion, s.Resource, s.Username, s.Seen.AsTime().Format(time.TimeOnly)))
		}
	}
	want := "[prod resource.k8s.io/v1alpha1 resourceclasses alice 10:00:07 prod resource.k8s.io/v1alpha2 resourceclasses alice 10:00:07 " +
		"prod resource.k8s.io/v1alpha3 deviceclasses alice 10:00:07 prod resource.k8s.io/v1beta1 deviceclasses alice 10:00:07 " +
		"prod resource.k8s.io/v1beta2 deviceclasses alice 10:00:07]"
	if fmt.Sprint(got) != want {
		t.Errorf("migration sightings %v, want %s", got, want)
	}
}

// TestMoveKeysOwnTheirStrings: a caller kept for the moves does not change when the bytes its
// events were decoded from are overwritten, the second call too (assigning to a key already in
// a map stores the key given: before, the second call's key replaced the kept one, its
// strings the overwritten line's, and the heartbeats' map lost the caller under its key).
func TestMoveKeysOwnTheirStrings(t *testing.T) {
	e, err := rules.Load()
	if err != nil {
		t.Fatal(err)
	}
	engine := rules.NewEngine(e)
	p := &clusterPlane{}
	buf := make([]byte, 0, 1024)
	for i, at := range []string{"2026-11-29T10:00:00Z", "2026-11-29T10:00:05Z"} {
		buf = append(buf[:0], eventAt(fmt.Sprint(i), at, `"requestURI":"/apis/resource.k8s.io/v1/deviceclasses","verb":"list","user":{"username":"alice"},"userAgent":"driver/v0.3","objectRef":{"resource":"deviceclasses","apiGroup":"resource.k8s.io","apiVersion":"v1"}`)...)
		ev, err := auditevent.NewDecoder(0).DecodeEvent(buf)
		if err != nil {
			t.Fatal(err)
		}
		p.observe(ev, &bus.Delivery{}, ev.EventTime(), engine.MoveOf(ev))
		for i := range buf {
			buf[i] = 'x'
		}
	}
	if len(p.moves) == 0 {
		t.Fatal("no move kept")
	}
	for k := range p.moves {
		if k.User != "alice" || k.Agent != "driver/v0.3" || k.API.Group != "resource.k8s.io" {
			t.Errorf("kept caller %+v after its bytes were overwritten", k)
		}
	}
}

// TestEnumeratorsFoundByTheirReads: a caller that reads the old version within minutes after
// reading its successor reads every served version: its read is an enumerator-read finding
// (blocking nothing), not a removed-api one; its writes, its reads without a recent read of
// the successor, and its reads answered 404 are removed-api findings.
func TestEnumeratorsFoundByTheirReads(t *testing.T) {
	b := openNATS(t)
	svc, stop := startHeartbeating(t, b)
	call := func(id, at, user, verb, version string, code int) bus.Message {
		uri := "/apis/" + map[string]string{"v1": "networking.k8s.io/v1", "v1beta1": "extensions/v1beta1"}[version] + "/ingresses"
		group := map[string]string{"v1": "networking.k8s.io", "v1beta1": "extensions"}[version]
		body := fmt.Sprintf(`"requestURI":%q,"verb":%q,"user":{"username":%q},"userAgent":"backup/2.1",`+
			`"objectRef":{"resource":"ingresses","apiGroup":%q,"apiVersion":%q},"responseStatus":{"code":%d}`, uri, verb, user, group, version, code)
		return bus.Message{Stream: bus.Events, Cluster: "prod", ID: id, Data: eventAt(id, "2026-11-29T"+at+"Z", body)}
	}
	msgs := []bus.Message{
		call("e1", "10:00:00", "backup", "list", "v1", 200),
		call("e2", "10:00:02", "backup", "list", "v1beta1", 200),   // enumerator-read
		call("e3", "10:00:03", "backup", "create", "v1beta1", 201), // a write: removed-api
		call("e4", "10:20:00", "backup", "list", "v1beta1", 200),   // 20 minutes after its last v1 read: removed-api
		call("e5", "10:00:04", "other", "list", "v1beta1", 200),    // another caller: removed-api
		call("e6", "10:21:00", "backup", "list", "v1", 200),
		call("e7", "10:21:30", "backup", "list", "v1beta1", 404), // not served: fails today, removed-api
	}
	// One by one, so that each read is settled before the next.
	for i, m := range msgs {
		if err := b.Publish(context.Background(), m); err != nil {
			t.Fatal(err)
		}
		n := uint64(i + 1)
		testkit.Eventually(t, 20*time.Second, fmt.Sprintf("%d events settled", n), func() bool { return svc.beats.sent(n) })
	}
	stop()
	got := map[string]string{}
	for _, f := range findingsIn(t, collect(t, b, bus.Findings, 1, 300*time.Millisecond)) {
		got[f.AuditId] = f.RuleId
	}
	want := map[string]string{"e2": "enumerator-read", "e3": "removed-api", "e4": "removed-api", "e5": "removed-api", "e7": "removed-api"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("findings %v, want %v", got, want)
	}
}

// newestTarget is the newest release whose removals the embedded catalogue knows.
func newestTarget(t *testing.T) string {
	t.Helper()
	c, err := rules.Load()
	if err != nil {
		t.Fatal(err)
	}
	ts := c.Targets()
	return ts[len(ts)-1].String()
}
