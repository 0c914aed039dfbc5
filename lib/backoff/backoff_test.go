package backoff

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestDelayDoublesWithinBounds(t *testing.T) {
	b := Backoff{Min: 100 * time.Millisecond, Max: time.Second, Jitter: -1}
	want := []int{100, 100, 200, 400, 800, 1000, 1000} // milliseconds
	for i, w := range want {
		if got := b.Delay(i); got != time.Duration(w)*time.Millisecond {
			t.Errorf("Delay(%d) = %s, want %dms", i, got, w)
		}
	}
	if got := b.Delay(1 << 30); got != time.Second {
		t.Errorf("Delay(huge) = %s, want the max", got)
	}
	if (Backoff{}).Delay(3) != 0 {
		t.Error("zero Backoff waits")
	}
}

func TestJitterSpreads(t *testing.T) {
	b := Backoff{Min: time.Second, Max: time.Minute}
	seen := map[time.Duration]bool{}
	for range 200 {
		d := b.Delay(1)
		if d < 800*time.Millisecond || d > 1200*time.Millisecond {
			t.Fatalf("Delay(1) = %s, outside +-20%% of 1s", d)
		}
		seen[d] = true
	}
	if len(seen) < 50 {
		t.Fatalf("only %d distinct delays in 200: no jitter", len(seen))
	}
}

func TestWaitStopsWithContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := (Backoff{Min: time.Hour}).Wait(ctx, 1); !errors.Is(err, context.Canceled) {
		t.Fatalf("Wait = %v, want context.Canceled", err)
	}
	if err := (Backoff{Min: time.Millisecond}).Wait(context.Background(), 1); err != nil {
		t.Fatal(err)
	}
}
