package chtest

import (
	"context"
	"database/sql"
	"testing"
	"time"
)

// ServerNow is the engine's clock, the one its TTL and a retention's first day kept are judged
// by (the tests' clock, testkit.Now, cannot set it). Within a minute of a UTC midnight it
// first waits for the next day: a test that sets rows on both sides of a day's edge and then
// reads them back must not see the edge move under it.
func ServerNow(t testing.TB, db *sql.DB) time.Time {
	t.Helper()
	for {
		var now uint32
		if err := db.QueryRowContext(context.Background(), "SELECT toUInt32(now())").Scan(&now); err != nil {
			t.Fatalf("read the engine's clock: %v", err)
		}
		at := time.Unix(int64(now), 0).UTC()
		left := at.Truncate(24 * time.Hour).Add(24 * time.Hour).Sub(at)
		if left > time.Minute {
			return at
		}
		time.Sleep(left + time.Second)
	}
}
