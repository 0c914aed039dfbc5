// Package enginetest decides what an integration test does when a real engine (ClickHouse,
// mailpit, Chromium, chDB) cannot start: skip with a clear message on a developer machine,
// fail in CI (CI=true), where every engine must be present.
package enginetest

import (
	"os"
	"testing"
)

// InCI reports whether tests run under CI (CI=true).
func InCI() bool { return os.Getenv("CI") == "true" }

// Unavailable skips t (or fails it in CI) because engine cannot be used, saying why.
func Unavailable(t testing.TB, engine string, why error) {
	t.Helper()
	if InCI() {
		t.Fatalf("%s is required in CI but unavailable: %v", engine, why)
	}
	t.Skipf("%s unavailable, skipping (CI=true makes this a failure): %v", engine, why)
}
