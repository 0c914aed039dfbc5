package testkit

import (
	"sync/atomic"
	"testing"
	"time"
)

func TestEventuallyWaitsForTheCondition(t *testing.T) {
	var n atomic.Int32
	go func() {
		for range 5 {
			time.Sleep(10 * time.Millisecond)
			n.Add(1)
		}
	}()
	Eventually(t, 10*time.Second, "five ticks", func() bool { return n.Load() == 5 })
}

// failRecorder records Fatalf and stops the goroutine as testing.T does.
type failRecorder struct {
	testing.TB
	msg string
}

func (f *failRecorder) Helper() {}
func (f *failRecorder) Fatalf(format string, args ...any) {
	f.msg = format
	panic(f)
}

func TestEventuallyFailsAfterTimeout(t *testing.T) {
	floor = 0
	defer func() { floor = Generous }()
	r := &failRecorder{TB: t}
	func() {
		defer func() {
			if p := recover(); p != r {
				t.Fatalf("Eventually did not fail: %v", p)
			}
		}()
		Eventually(r, 50*time.Millisecond, "never", func() bool { return false })
	}()
	if r.msg == "" {
		t.Fatal("no failure message")
	}
}

// A wait for something that will happen is never shorter than Generous.
func TestBoundIsGenerous(t *testing.T) {
	if Bound(time.Second) != Generous || Bound(2*Generous) != 2*Generous {
		t.Errorf("Bound(1s) = %s, Bound(2 x Generous) = %s", Bound(time.Second), Bound(2*Generous))
	}
}
