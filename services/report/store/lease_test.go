package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/auditlens/auditlens/services/report/chtest"
	"github.com/auditlens/auditlens/services/report/store"
)

// One process holds a lease at a time: the first to ask takes it and renews it, another is
// refused while it holds it, takes it at once when it is released, and takes it over when its
// holder stops renewing it for its TTL. Leases of other names are apart.
func TestLeaseHasOneHolder(t *testing.T) {
	chtest.EachEngine(t, func(t *testing.T, _ chtest.Engine, st *store.Store) {
		ctx := context.Background()
		a, b := st.Lease("compact", 2*time.Second), st.Lease("compact", 2*time.Second)
		hold := func(l *store.Lease, want bool, when string) {
			t.Helper()
			got, holder, err := l.Hold(ctx)
			if err != nil || got != want {
				t.Fatalf("%s: %s holds: %v (holder %q, %v), want %v", when, l.Holder(), got, holder, err, want)
			}
		}
		if a.Holder() == b.Holder() {
			t.Fatalf("two leases share the holder id %q", a.Holder())
		}
		hold(a, true, "a first")
		hold(b, false, "b while a holds")
		hold(a, true, "a renews")
		hold(b, false, "b after a renewed")
		other := st.Lease("expire", time.Second)
		if ok, holder, err := other.Hold(ctx); err != nil || !ok || holder != other.Holder() {
			t.Errorf("another lease: held %v by %q (%v), want free for its first asker", ok, holder, err)
		}
		if err := b.Release(ctx); err != nil {
			t.Fatal(err)
		}
		hold(a, true, "a after b released what it did not hold")
		if err := a.Release(ctx); err != nil {
			t.Fatal(err)
		}
		hold(b, true, "b after a released")
		hold(a, false, "a after b took it")
		// b stops renewing: after its TTL (by the server's clock, whole seconds) a takes over.
		time.Sleep(3100 * time.Millisecond)
		hold(a, true, "a after b's TTL ran out")
		hold(b, false, "b back after a took over")
	})
}
