// Package testkit holds the helpers every module's tests share.
package testkit

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
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

// NowEnv names the environment variable that sets the tests' "now" (RFC 3339), so a date
// that breaks a test can be replayed on any day: AUDITLENS_TEST_NOW=2026-12-05T04:00:00Z.
const NowEnv = "AUDITLENS_TEST_NOW"

// Now is the tests' one source of "now": the time AUDITLENS_TEST_NOW names, advancing with the
// real clock from the moment the test binary started (so a test that waits still sees time
// pass), or the real clock when it is unset. Tests whose outcome depends on the date (week
// ends, month ends, lookback windows, expiries, TTLs) take now from here and hand it to the
// code's injected clocks; durations are still measured with time.Now. A malformed value
// panics: a run asked to be at a date must not silently run at another.
func Now() time.Time {
	if fixed.IsZero() {
		return time.Now()
	}
	return fixed.Add(time.Since(started))
}

var started = time.Now()

var fixed = mustParseNow()

func mustParseNow() time.Time {
	v := os.Getenv(NowEnv)
	if v == "" {
		return time.Time{}
	}
	t, err := time.Parse(time.RFC3339, v)
	if err != nil {
		panic(fmt.Sprintf("testkit: %s=%q is not RFC 3339 (2026-12-05T04:00:00Z): %v", NowEnv, v, err))
	}
	return t
}

// ModuleDir is the directory of the go.mod holding the test's working directory (go test runs
// a package's tests in its directory): the root a test finds its module's testdata and
// commands from. It does not use runtime.Caller, whose file names -trimpath makes relative
// (make test builds the tests as the release builds, -trimpath among its flags).
func ModuleDir() (string, error) {
	d, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return d, nil
		}
		up := filepath.Dir(d)
		if up == d {
			return "", errors.New("testkit: no go.mod above the working directory")
		}
		d = up
	}
}
