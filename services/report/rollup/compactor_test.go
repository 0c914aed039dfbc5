package rollup_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/auditlens/auditlens/lib/testkit"
	"github.com/auditlens/auditlens/services/report/chtest"
	"github.com/auditlens/auditlens/services/report/rollup"
	"github.com/auditlens/auditlens/services/report/store"
)

// Of two report processes on one store, one compacts (it holds the store's compaction
// lease) and the other waits; when the first stops, the second takes over at its next round.
func TestOneCompactorPerStore(t *testing.T) {
	chtest.EachEngine(t, func(t *testing.T, _ chtest.Engine, st *store.Store) {
		cfg := rollup.Config{Interval: 100 * time.Millisecond}
		start := func() (*rollup.Compactor, context.CancelFunc, <-chan error) {
			c := rollup.NewCompactor(cfg, st.DB(), "findings", nil, st.Lease("compact", cfg.LeaseTTL()), slog.New(slog.DiscardHandler), nil)
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- c.Run(ctx) }()
			return c, cancel, done
		}
		first, stopFirst, firstDone := start()
		defer stopFirst()
		testkit.Eventually(t, 10*time.Second, "the first compactor holds the lease", first.Held)
		second, stopSecond, secondDone := start()
		defer stopSecond()
		for range 10 { // ten rounds of both
			time.Sleep(cfg.Interval)
			if second.Held() || !first.Held() {
				t.Fatalf("held by the first %v, by the second %v; want the first only", first.Held(), second.Held())
			}
		}
		stopFirst()
		if err := <-firstDone; err != nil {
			t.Fatal(err)
		}
		testkit.Eventually(t, 10*time.Second, "the second compactor takes over", second.Held)
		stopSecond()
		if err := <-secondDone; err != nil {
			t.Fatal(err)
		}
	})
}
