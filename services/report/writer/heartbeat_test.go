package writer

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/auditlens/auditlens/lib/bus"
	"github.com/auditlens/auditlens/lib/testkit"
	auditlensv1 "github.com/auditlens/auditlens/proto/auditlens/v1"
	"github.com/auditlens/auditlens/services/report/chtest"
	"github.com/auditlens/auditlens/services/report/console"
	"github.com/auditlens/auditlens/services/report/store"
)

// heartbeatMsg is a Heartbeat of cluster with the running counts of minutes after t0.
func heartbeatMsg(cluster, msgID string, counts map[int]uint64) bus.Message {
	hb := &auditlensv1.Heartbeat{Cluster: cluster}
	for m, n := range counts {
		hb.Minutes = append(hb.Minutes, &auditlensv1.EventMinute{Minute: timestamppb.New(t0.Add(time.Duration(m) * time.Minute)), Events: n})
	}
	data, err := proto.Marshal(hb)
	if err != nil {
		panic(err)
	}
	return bus.Message{Stream: bus.Findings, Cluster: cluster, ID: msgID, Data: data,
		Header: map[string]string{auditlensv1.MessageTypeHeader: auditlensv1.HeartbeatMessageType}}
}

// TestHeartbeatsAreStored: classify's heartbeats, alone and beside findings, repeated (a
// redelivery under another id), with a smaller count (another replica) and a larger one (a
// later heartbeat), land in event_minutes as the largest count per cluster and minute; every
// message is acknowledged; the findings still count once; an undecodable heartbeat is
// dead-lettered.
func TestHeartbeatsAreStored(t *testing.T) {
	chtest.EachEngine(t, func(t *testing.T, e chtest.Engine, st *store.Store) {
		b := openBus(t)
		w, _ := startWriter(t, testConfig(), st, b)
		ctx := context.Background()
		msgs := []bus.Message{
			heartbeatMsg("prod", "h1", map[int]uint64{0: 5, 1: 7}),
			batchMsg("prod", "f1", finding("prod", "a1", "psp"), finding("prod", "a2", "psp")),
			heartbeatMsg("prod", "h1-again", map[int]uint64{0: 5, 1: 7}),
			heartbeatMsg("prod", "h-replica", map[int]uint64{0: 2}),
			heartbeatMsg("quiet", "h-quiet", map[int]uint64{3: 1}),
			heartbeatMsg("prod", "h2", map[int]uint64{1: 12, 2: 1}),
			{Stream: bus.Findings, Cluster: "prod", ID: "h-garbage", Data: []byte("\xff\xff not protobuf"),
				Header: map[string]string{auditlensv1.MessageTypeHeader: auditlensv1.HeartbeatMessageType}},
			{Stream: bus.Findings, Cluster: "prod", ID: "h-no-minute", Data: mustMarshal(&auditlensv1.Heartbeat{Cluster: "prod", Minutes: []*auditlensv1.EventMinute{{Events: 3}}}),
				Header: map[string]string{auditlensv1.MessageTypeHeader: auditlensv1.HeartbeatMessageType}},
		}
		if err := b.Publish(ctx, msgs...); err != nil {
			t.Fatal(err)
		}
		testkit.Eventually(t, time.Minute, "every minute written", func() bool { return testutil.ToFloat64(w.m.eventMinutes) >= 8 })
		testkit.Eventually(t, time.Minute, "the bad heartbeats dead-lettered", func() bool { return testutil.ToFloat64(w.m.deadLettered) >= 2 })
		testkit.Eventually(t, time.Minute, "every message acknowledged", func() bool {
			n, err := b.Backlog(ctx, bus.Findings, testConfig().Group)
			return err == nil && n == 0
		})
		if n := distinct(t, st); n != 2 {
			t.Errorf("%d findings, want 2", n)
		}
		rows, err := st.DB().QueryContext(ctx, `SELECT toString(cluster), toUInt32(minute), max(events) FROM event_minutes GROUP BY cluster, minute ORDER BY 1, 2`)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		got := map[string]uint64{}
		for rows.Next() {
			var c string
			var m uint32
			var n uint64
			if err := rows.Scan(&c, &m, &n); err != nil {
				t.Fatal(err)
			}
			got[c+" "+time.Unix(int64(m), 0).UTC().Sub(t0).String()] = n
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		want := map[string]uint64{"prod 0s": 5, "prod 1m0s": 12, "prod 2m0s": 1, "quiet 3m0s": 1}
		if len(got) != len(want) {
			t.Errorf("event minutes %v, want %v", got, want)
		}
		for k, n := range want {
			if got[k] != n {
				t.Errorf("%s: %d events, want %d (all: %v)", k, got[k], n, got)
			}
		}
	})
}

func mustMarshal(m proto.Message) []byte {
	data, err := proto.Marshal(m)
	if err != nil {
		panic(err)
	}
	return data
}

// TestControlPlaneSightingsAreStored: the control plane's sightings in classify's heartbeats
// (beside minutes, alone, repeated) land in control_plane_sightings, where the console reads
// the cluster's release back; a sighting without a component, with a version that is not a
// release, without a time or with one past the writer's clock is skipped and counted, and
// the minutes and good sightings beside it are written, nothing dead-lettered.
func TestControlPlaneSightingsAreStored(t *testing.T) {
	chtest.EachEngine(t, func(t *testing.T, e chtest.Engine, st *store.Store) {
		b := openBus(t)
		w, _ := startWriter(t, testConfig(), st, b)
		ctx := context.Background()
		at := func(m int) *timestamppb.Timestamp { return timestamppb.New(t0.Add(time.Duration(m) * time.Minute)) }
		msg := func(id string, hb *auditlensv1.Heartbeat) bus.Message {
			return bus.Message{Stream: bus.Findings, Cluster: hb.Cluster, ID: id, Data: mustMarshal(hb),
				Header: map[string]string{auditlensv1.MessageTypeHeader: auditlensv1.HeartbeatMessageType}}
		}
		prod := &auditlensv1.Heartbeat{Cluster: "prod", Minutes: []*auditlensv1.EventMinute{{Minute: at(0), Events: 5}},
			ControlPlane: []*auditlensv1.ControlPlaneSighting{
				{Component: "kube-apiserver", Version: "1.36", Seen: at(0)},
				{Component: "kube-apiserver", Version: "v1.37.2", Seen: at(2)}, // as an agent writes it
				{Component: "", Version: "1.37", Seen: at(2)},
				{Component: "kube-scheduler", Version: "banana", Seen: at(2)},
				{Component: "kube-scheduler", Version: "1.37"},
				{Component: "kube-scheduler", Version: "1.99", Seen: timestamppb.New(time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC))},
			}}
		quiet := &auditlensv1.Heartbeat{Cluster: "quiet", ControlPlane: []*auditlensv1.ControlPlaneSighting{
			{Component: "kube-controller-manager", Version: "1.36", Seen: at(3)},
		}}
		if err := b.Publish(ctx, msg("hb-prod", prod), msg("hb-quiet", quiet), msg("hb-quiet-again", quiet)); err != nil {
			t.Fatal(err)
		}
		testkit.Eventually(t, time.Minute, "the good sightings written", func() bool { return testutil.ToFloat64(w.m.sightings) >= 4 })
		testkit.Eventually(t, time.Minute, "every message acknowledged", func() bool {
			n, err := b.Backlog(ctx, bus.Findings, testConfig().Group)
			return err == nil && n == 0
		})
		if n := testutil.ToFloat64(w.m.sightingsSkipped); n != 4 {
			t.Errorf("%v sightings skipped, want 4", n)
		}
		if n := testutil.ToFloat64(w.m.eventMinutes); n != 1 {
			t.Errorf("%v minutes written, want the 1 beside the bad sightings", n)
		}
		if n := testutil.ToFloat64(w.m.deadLettered) + testutil.ToFloat64(w.m.invalid); n != 0 {
			t.Errorf("%v messages dead-lettered or invalid, want none", n)
		}
		r := console.Reader{DB: st.DB()}
		now := testkit.Now()
		for _, c := range []struct{ cluster, want, why string }{
			{"prod", "1.37", "the kube-apiserver's user agent, seen 2026-11-23 08:02 UTC"},
			{"quiet", "1.36", "the kube-controller-manager's user agent, seen 2026-11-23 08:03 UTC"},
		} {
			v, why, err := r.ClusterRelease(ctx, c.cluster, now)
			if err != nil || v.String() != c.want || why != c.why {
				t.Errorf("ClusterRelease(%s) = %q, %q, %v; want %q, %q", c.cluster, v, why, err, c.want, c.why)
			}
		}
		ss, err := r.ControlPlane(ctx, "prod", now)
		if err != nil || len(ss) != 1 || ss[0].Component != "kube-apiserver" || ss[0].Version.String() != "1.37" || !ss[0].At.Equal(t0.Add(2*time.Minute)) {
			t.Errorf("ControlPlane(prod) = %v, %v; want only the apiserver's 1.37 at %s", ss, err, t0.Add(2*time.Minute))
		}
	})
}

// TestCoverageSightingsAreStored: the kinds of events in classify's heartbeats land in
// coverage_sightings, where the console reads a window's coverage back; a kind with no input,
// an unknown kind of write, an unprintable level or no time is skipped and counted, nothing
// dead-lettered.
func TestCoverageSightingsAreStored(t *testing.T) {
	chtest.EachEngine(t, func(t *testing.T, e chtest.Engine, st *store.Store) {
		b := openBus(t)
		w, _ := startWriter(t, testConfig(), st, b)
		ctx := context.Background()
		at := func(m int) *timestamppb.Timestamp { return timestamppb.New(t0.Add(time.Duration(m) * time.Minute)) }
		hb := &auditlensv1.Heartbeat{Cluster: "prod", Coverage: []*auditlensv1.CoverageSighting{
			{Input: "file", Level: "Metadata", Seen: at(0)},
			{Input: "file", Level: "Metadata", Writes: "no-body", Seen: at(1)},
			{Input: "", Level: "Metadata", Seen: at(1)},
			{Input: "file", Level: "Metadata", Writes: "maybe", Seen: at(1)},
			{Input: "file", Level: "Meta\x1bdata", Seen: at(1)},
			{Input: "webhook", Level: "Request"},
		}}
		msg := bus.Message{Stream: bus.Findings, Cluster: "prod", ID: "hb-cov", Data: mustMarshal(hb),
			Header: map[string]string{auditlensv1.MessageTypeHeader: auditlensv1.HeartbeatMessageType}}
		if err := b.Publish(ctx, msg); err != nil {
			t.Fatal(err)
		}
		testkit.Eventually(t, time.Minute, "every message acknowledged", func() bool {
			n, err := b.Backlog(ctx, bus.Findings, testConfig().Group)
			return err == nil && n == 0 && testutil.ToFloat64(w.m.sightings) >= 2
		})
		if n := testutil.ToFloat64(w.m.sightingsSkipped); n != 4 {
			t.Errorf("%v coverage sightings skipped, want 4", n)
		}
		if n := testutil.ToFloat64(w.m.deadLettered) + testutil.ToFloat64(w.m.invalid); n != 0 {
			t.Errorf("%v messages dead-lettered or invalid, want none", n)
		}
		got, err := console.Reader{DB: st.DB()}.Coverage(ctx, "prod", console.Window{From: t0.Add(-time.Hour), To: t0.Add(time.Hour)})
		if err != nil || !got.Known || strings.Join(got.Inputs, ",") != "file" || got.Bodies != console.BodiesMetadataOnly {
			t.Errorf("coverage %+v, %v; want file, Metadata, metadata-only", got, err)
		}
	})
}

// TestMigrationSightingsAreStored: the callers' moves in classify's heartbeats land in
// migration_sightings to the second, their strings as sent; one without a resource, with a
// caller too long or without a time is skipped and counted, nothing dead-lettered.
func TestMigrationSightingsAreStored(t *testing.T) {
	chtest.EachEngine(t, func(t *testing.T, e chtest.Engine, st *store.Store) {
		b := openBus(t)
		w, _ := startWriter(t, testConfig(), st, b)
		ctx := context.Background()
		seen := timestamppb.New(t0.Add(7 * time.Second))
		agent := "driver/v0.3 '); DROP TABLE findings; --"
		hb := &auditlensv1.Heartbeat{Cluster: "prod", Migrations: []*auditlensv1.MigrationSighting{
			{ApiGroup: "resource.k8s.io", ApiVersion: "v1beta1", Resource: "deviceclasses", Username: "alice", UserAgent: agent, Seen: seen},
			{ApiGroup: "resource.k8s.io", ApiVersion: "v1beta1", Username: "alice", Seen: seen},
			{ApiGroup: "resource.k8s.io", ApiVersion: "v1beta1", Resource: "deviceclasses", Username: strings.Repeat("a", 5000), Seen: seen},
			{ApiGroup: "resource.k8s.io", ApiVersion: "v1beta1", Resource: "deviceclasses", Username: "bob"},
		}}
		msg := bus.Message{Stream: bus.Findings, Cluster: "prod", ID: "hb-mig", Data: mustMarshal(hb),
			Header: map[string]string{auditlensv1.MessageTypeHeader: auditlensv1.HeartbeatMessageType}}
		if err := b.Publish(ctx, msg); err != nil {
			t.Fatal(err)
		}
		testkit.Eventually(t, time.Minute, "every message acknowledged", func() bool {
			n, err := b.Backlog(ctx, bus.Findings, testConfig().Group)
			return err == nil && n == 0 && testutil.ToFloat64(w.m.sightings) >= 1
		})
		if n := testutil.ToFloat64(w.m.sightingsSkipped); n != 3 {
			t.Errorf("%v migration sightings skipped, want 3", n)
		}
		if n := testutil.ToFloat64(w.m.deadLettered) + testutil.ToFloat64(w.m.invalid); n != 0 {
			t.Errorf("%v messages dead-lettered or invalid, want none", n)
		}
		var got string
		err := st.DB().QueryRowContext(ctx, `SELECT concat(cluster, ' ', api_group, '/', api_version, ' ', resource, ' ', username, ' ', user_agent, ' ', toString(seen))
FROM `+st.Table("migration_sightings")).Scan(&got)
		if want := "prod resource.k8s.io/v1beta1 deviceclasses alice " + agent + " " + t0.Add(7*time.Second).Format(time.DateTime); err != nil || got != want {
			t.Errorf("stored %q, %v; want %q", got, err, want)
		}
	})
}

// TestReviewSightingsAreStoredOncePerDay: the catalogue release of classify's heartbeats lands
// in review_sightings at the newest minute of each day of the heartbeat's minutes, once per
// cluster, release and day however many heartbeats say it; a release that is not one, or a heartbeat without minutes,
// writes nothing.
func TestReviewSightingsAreStoredOncePerDay(t *testing.T) {
	chtest.EachEngine(t, func(t *testing.T, e chtest.Engine, st *store.Store) {
		b := openBus(t)
		w, _ := startWriter(t, testConfig(), st, b)
		ctx := context.Background()
		beats := 0.0
		beat := func(id, through string, minutes ...int) {
			t.Helper()
			hb := &auditlensv1.Heartbeat{Cluster: "prod", ReviewedThrough: through}
			for _, m := range minutes {
				hb.Minutes = append(hb.Minutes, &auditlensv1.EventMinute{Minute: timestamppb.New(t0.Add(time.Duration(m) * time.Minute)), Events: 1})
			}
			if err := b.Publish(ctx, bus.Message{Stream: bus.Findings, Cluster: "prod", ID: id, Data: mustMarshal(hb),
				Header: map[string]string{auditlensv1.MessageTypeHeader: auditlensv1.HeartbeatMessageType}}); err != nil {
				t.Fatal(err)
			}
			// One at a time: the next heartbeat is sent once this one is written.
			beats++
			testkit.Eventually(t, time.Minute, "the heartbeat written", func() bool { return testutil.ToFloat64(w.m.heartbeats) >= beats })
		}
		beat("r1", "1.38", 0, 3)
		beat("r2", "1.38", 5)
		beat("r3", "1.38", 24*60+1)
		beat("r4", "one.38", 7)
		beat("r5", "1.37")
		beat("r6", "1.38", 3*24*60+2, 2*24*60+9, 2*24*60+4) // two days in one heartbeat: each day's newest
		var got []string
		rows, err := st.DB().QueryContext(ctx, `SELECT concat(toString(cluster), ' ', through, ' ', toString(seen)) FROM `+st.Table("review_sightings")+` ORDER BY seen`)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		for rows.Next() {
			var s string
			if err := rows.Scan(&s); err != nil {
				t.Fatal(err)
			}
			got = append(got, s)
		}
		want := []string{"prod 1.38 " + t0.Add(3*time.Minute).Format(time.DateTime), "prod 1.38 " + t0.Add(24*time.Hour+time.Minute).Format(time.DateTime),
			"prod 1.38 " + t0.Add(48*time.Hour+9*time.Minute).Format(time.DateTime), "prod 1.38 " + t0.Add(72*time.Hour+2*time.Minute).Format(time.DateTime)}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("review sightings %v, want %v", got, want)
		}
		if n := testutil.ToFloat64(w.m.deadLettered) + testutil.ToFloat64(w.m.invalid); n != 0 {
			t.Errorf("%v messages dead-lettered or invalid, want none", n)
		}
	})
}
