// Package testkit holds the helpers every module's tests share.
package testkit

import (
	"testing"
	"time"
)

// Generous is the least a test waits for something that will happen: on a machine loaded to
// several times its cores (make test beside other work, CI under stress-ng) a consumer that is
// created in 50 ms on a quiet machine took more than 30 s. Waiting on a condition costs only
// what the condition takes, so the bound can be generous; a test that fails waits longer.
const Generous = 3 * time.Minute

// Bound is d, or Generous when d is shorter: the deadline of a wait for something that will
// happen (not of one asserting that nothing does, nor of a measurement).
func Bound(d time.Duration) time.Duration { return max(d, floor) }

// floor is Generous; this package's own tests lower it to see a wait fail.
var floor = Generous

// Eventually polls cond until it holds, failing t with what after Bound(timeout). It polls
// often at first and backs off to every 200ms, so a fast condition costs little and a slow
// one little CPU.
func Eventually(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	timeout = Bound(timeout)
	deadline := time.Now().Add(timeout)
	wait := 5 * time.Millisecond
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(wait)
		wait = min(wait*2, 200*time.Millisecond)
	}
}
