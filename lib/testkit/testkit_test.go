package testkit

import (
	"os"
	"path/filepath"
	"strings"
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

func TestNowFollowsTheEnvironment(t *testing.T) {
	defer func(f time.Time) { fixed = f }(fixed)
	fixed = time.Time{}
	if d := time.Since(Now()); d < 0 || d > time.Minute {
		t.Fatalf("unset: Now is %s from the clock", d)
	}
	t.Setenv(NowEnv, "2028-02-29T23:59:30Z")
	fixed = mustParseNow()
	n := Now()
	want := time.Date(2028, 2, 29, 23, 59, 30, 0, time.UTC)
	if n.Before(want) || n.Sub(want) > time.Since(started)+time.Second {
		t.Fatalf("Now = %s, want %s plus the time since start", n, want)
	}
	t.Setenv(NowEnv, "Saturday")
	defer func() {
		if recover() == nil {
			t.Fatal("a malformed value did not panic")
		}
	}()
	mustParseNow()
}

func TestModuleDirIsTheModulesRoot(t *testing.T) {
	d, err := ModuleDir()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(d, "go.mod"))
	if err != nil || !strings.Contains(string(b), "module github.com/auditlens/auditlens/lib\n") {
		t.Fatalf("ModuleDir %s: go.mod %q, %v", d, b, err)
	}
}
