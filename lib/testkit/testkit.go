// Package testkit holds the helpers every module's tests share.
package testkit

import (
	"testing"
	"time"
)

// Eventually polls cond until it holds, failing t with what after timeout. It polls often at
// first and backs off to every 200ms, so a fast condition costs little and a slow one little
// CPU.
func Eventually(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
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
