package writer

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/auditlens/auditlens/lib/bus"
	"github.com/auditlens/auditlens/lib/testkit"
	auditlensv1 "github.com/auditlens/auditlens/proto/auditlens/v1"
	"github.com/auditlens/auditlens/services/report/chtest"
	"github.com/auditlens/auditlens/services/report/store"
)

// Event times the store cannot keep (before 1970, past 2106) or far past the writer's clock
// (a wrong clock, a forged event; the writer's clock is the tests' now) are dead-lettered one by one; the findings beside them and
// the heartbeat minutes in range are written, and the writer stays ready (review 3 E5, E10).
func TestEventTimesOutOfRange(t *testing.T) {
	chtest.EachEngine(t, func(t *testing.T, e chtest.Engine, st *store.Store) {
		b := openBus(t)
		w, _ := startWriter(t, testConfig(), st, b)
		ctx := context.Background()
		at := func(id string, ts time.Time) *auditlensv1.Finding {
			f := finding("prod", id, "psp")
			f.EventTime = timestamppb.New(ts)
			return f
		}
		bad := map[string]time.Time{
			"before-1970": time.Date(1969, 12, 31, 23, 59, 59, 0, time.UTC),
			"year-1900":   time.Date(1900, 1, 1, 0, 0, 0, 0, time.UTC),
			"year-9999":   time.Date(9999, 12, 31, 0, 0, 0, 0, time.UTC),
			"year-2100":   time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC),
			"next-week":   testkit.Now().Add(7 * 24 * time.Hour),
		}
		fs := []*auditlensv1.Finding{at("ok-1", t0), at("ok-now", testkit.Now())}
		for _, id := range []string{"before-1970", "year-1900", "year-9999", "year-2100", "next-week"} {
			fs = append(fs, at(id, bad[id]))
		}
		hb := &auditlensv1.Heartbeat{Cluster: "prod", Minutes: []*auditlensv1.EventMinute{
			{Minute: timestamppb.New(t0), Events: 4},
			{Minute: timestamppb.New(time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC)), Events: 9},
			{Minute: timestamppb.New(time.Date(1900, 1, 1, 0, 0, 0, 0, time.UTC)), Events: 9},
		}}
		msgs := []bus.Message{batchMsg("prod", "times", fs...), {Stream: bus.Findings, Cluster: "prod", ID: "hb-times", Data: mustMarshal(hb),
			Header: map[string]string{auditlensv1.MessageTypeHeader: auditlensv1.HeartbeatMessageType}}}
		if err := b.Publish(ctx, msgs...); err != nil {
			t.Fatal(err)
		}
		testkit.Eventually(t, time.Minute, "the two good findings", func() bool { return distinct(t, st) == 2 })
		testkit.Eventually(t, time.Minute, "the minute in range", func() bool { return testutil.ToFloat64(w.m.eventMinutes) >= 1 })
		dl := deadLetters(t, b, 5)
		for i, id := range []string{"before-1970", "year-1900", "year-9999", "year-2100", "next-week"} {
			if r := dl["report/times#"+string(rune('2'+i))]; !strings.Contains(r, "event time out of range") {
				t.Errorf("%s: dead letter %q, want event time out of range", id, r)
			}
		}
		if n := testutil.ToFloat64(w.m.minutesSkipped); n != 2 {
			t.Errorf("%v heartbeat minutes skipped, want 2", n)
		}
		var newest uint32
		if err := st.DB().QueryRowContext(ctx, "SELECT toUInt32(max(minute)) FROM event_minutes").Scan(&newest); err != nil {
			t.Fatal(err)
		}
		if got := time.Unix(int64(newest), 0).UTC(); !got.Equal(t0) {
			t.Errorf("the newest event minute is %s, want %s", got, t0)
		}
		testkit.Eventually(t, time.Minute, "every message acknowledged", func() bool {
			n, err := b.Backlog(ctx, bus.Findings, testConfig().Group)
			return err == nil && n == 0
		})
		if err := w.Ready(); err != nil {
			t.Errorf("not ready: %v", err)
		}
	})
}
