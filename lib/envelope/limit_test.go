package envelope

import (
	"encoding/base64"
	"errors"
	"runtime"
	"testing"

	"github.com/auditlens/auditlens/lib/auditevent"
	"github.com/auditlens/auditlens/lib/envelope/envelopetest"
	"github.com/auditlens/auditlens/lib/reason"
)

// amplified is a Firehose body of n records, each a gzip of a subscription payload of size
// bytes: a small request that decodes to n*size.
func amplified(n, size int) []byte {
	rec := envelopetest.Gzip(envelopetest.Padded(size))
	recs := make([][]byte, n)
	for i := range recs {
		recs[i] = rec
	}
	return envelopetest.FirehoseBody("amplified", recs...)
}

// TestLimitBoundsAllRecords: each record is below the decoder's per-layer cap, but together
// they decode to more than the Limit: the walk stops with ErrLimit (a too_large error) having
// decoded no more than the limit. Without a Limit all of it decodes.
func TestLimitBoundsAllRecords(t *testing.T) {
	body := amplified(20, 1<<20)
	if len(body) > 64<<10 {
		t.Fatalf("amplified body of %d bytes: want a small one", len(body))
	}
	d := NewDecoder(2 << 20)
	lim := &Limit{Max: 4 << 20}
	d.SetLimit(lim)
	_, _, err := d.Split(body, 2<<20)
	if !errors.Is(err, ErrLimit) || reason.Of(err) != reason.TooLarge {
		t.Fatalf("split: %v, want ErrLimit", err)
	}
	if lim.Decoded() > lim.Max {
		t.Errorf("decoded %d bytes, limit %d", lim.Decoded(), lim.Max)
	}
	d.SetLimit(nil)
	items, _, err := d.Split(body, 2<<20)
	if err != nil || len(items) != 20 {
		t.Fatalf("without a limit: %d items, %v", len(items), err)
	}
}

// TestBudgetIsShared: two messages decoded at once share the budget; the one that would pass
// it gets ErrBusy (retryable) and succeeds once the other released its bytes. Limits reset per
// record keep the budget taken.
func TestBudgetIsShared(t *testing.T) {
	msg := envelopetest.Gzip(envelopetest.Padded(3 << 20))
	b := NewBudget(5 << 20)
	first, second := &Limit{Max: 4 << 20, Budget: b}, &Limit{Max: 4 << 20, Budget: b}
	d1, d2 := NewDecoder(0), NewDecoder(0)
	d1.SetLimit(first)
	d2.SetLimit(second)
	if _, _, err := d1.SplitAny(msg, 4<<20); err != nil {
		t.Fatal(err)
	}
	if b.InUse() < 3<<20-4096 {
		t.Fatalf("budget in use %d after one message", b.InUse())
	}
	if _, _, err := d2.SplitAny(msg, 4<<20); !errors.Is(err, ErrBusy) {
		t.Fatalf("second message while the first holds the budget: %v, want ErrBusy", err)
	}
	second.Release()
	first.Release()
	if b.InUse() != 0 {
		t.Fatalf("budget in use %d after release", b.InUse())
	}
	second.Reset()
	items, _, err := d2.SplitAny(msg, 4<<20)
	if err != nil || len(items) != 1 {
		t.Fatalf("after release: %d items, %v", len(items), err)
	}
	second.Reset()
	if second.Used() != 0 || b.InUse() == 0 {
		t.Errorf("Reset: used %d, budget in use %d (want 0 and kept)", second.Used(), b.InUse())
	}
	second.Release()
}

// FuzzDecodedBound: whatever the input, a decoder with a Limit decodes no more than the limit
// (its own count), allocates in proportion to the input and the limit (an independent count:
// the runtime's), and hands out no more event bytes than the input and what it decoded.
func FuzzDecodedBound(f *testing.F) {
	const max = 64 << 10
	bomb := envelopetest.Gzip(envelopetest.Padded(8 << 20))
	f.Add(bomb)
	f.Add(envelopetest.Gzip(bomb))
	f.Add(amplified(8, 1<<20))
	f.Add([]byte(`{"awslogs":{"data":"` + base64.StdEncoding.EncodeToString(bomb) + `"}}`))
	for _, sh := range envelopetest.Shapes([][]byte{[]byte(`{"kind":"Event","apiVersion":"audit.k8s.io/v1","auditID":"a","stage":"ResponseComplete"}`)}) {
		f.Add(sh.Data)
	}
	d := NewDecoder(0) // 64 MiB per layer: the Limit is the bound
	var ms runtime.MemStats
	f.Fuzz(func(t *testing.T, data []byte) {
		lim := &Limit{Max: max}
		d.SetLimit(lim)
		out := 0
		runtime.ReadMemStats(&ms)
		before := ms.TotalAlloc
		_, err := d.Unwrap(data, func(ev []byte, _ Origin) error {
			out += len(ev)
			return nil
		})
		runtime.ReadMemStats(&ms)
		alloc := ms.TotalAlloc - before
		if lim.Decoded() > max {
			t.Fatalf("decoded %d bytes, limit %d (err %v)", lim.Decoded(), max, err)
		}
		if bound := 16*(uint64(len(data))+max) + 4<<20; alloc > bound {
			t.Fatalf("allocated %d bytes for %d bytes of input (bound %d, decoded %d)", alloc, len(data), bound, lim.Decoded())
		}
		// An event is cut from the input or from what was decoded, plus the annotation (and,
		// for GKE, the field names of the Event it is converted to).
		if out > 4*(len(data)+int(lim.Decoded()))+1024 && !errors.Is(err, auditevent.ErrTooLarge) {
			t.Fatalf("%d bytes of events from %d bytes of input and %d decoded", out, len(data), lim.Decoded())
		}
	})
}
