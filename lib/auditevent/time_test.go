package auditevent

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

// parseTime's fast path gives what time.Date and time.Parse give, on every day of years
// around the edges (year 0, leap centuries, 9999) and on random instants.
func TestParseTimeIsTimeDate(t *testing.T) {
	check := func(y, mo, d, h, mi, sec, us int) {
		t.Helper()
		for _, v := range []string{
			fmt.Sprintf("%04d-%02d-%02dT%02d:%02d:%02d.%06dZ", y, mo, d, h, mi, sec, us),
			fmt.Sprintf("%04d-%02d-%02dT%02d:%02d:%02dZ", y, mo, d, h, mi, sec), // v1beta1's timestamp
		} {
			got, err := parseTime(v)
			want := time.Date(y, time.Month(mo), d, h, mi, sec, us*1000, time.UTC)
			if len(v) == 20 {
				want = want.Truncate(time.Second)
			}
			parsed, perr := time.Parse(time.RFC3339Nano, v)
			if err != nil || perr != nil || got != want || !got.Equal(parsed) {
				t.Fatalf("parseTime(%s) = %v, %v; want %v (time.Parse: %v, %v)", v, got, err, want, parsed, perr)
			}
		}
	}
	for _, y := range []int{0, 1, 4, 99, 100, 399, 400, 1600, 1900, 1969, 1970, 1971, 2000, 2024, 2026, 2100, 9999} {
		for mo := 1; mo <= 12; mo++ {
			for d := 1; d <= daysIn(mo, y); d++ {
				check(y, mo, d, 23, 59, 59, 999999)
			}
		}
	}
	// What the fast path declines goes to time.Parse: the same value or the same error.
	for _, v := range []string{"2026-02-29T00:00:00Z", "2026-02-28T24:00:00Z", "2026-02-28T23:60:00Z", "2026-02-28T23:00:60Z",
		"2026-13-01T00:00:00Z", "2026-00-01T00:00:00Z", "2026-01-00T00:00:00Z", "+026-01-01T00:00:00Z", "2026-01-01T00:00:00z",
		"2026-01-01T00:00:00.5Z", "2026-01-01T00:00:00.123456789Z", "2026-01-01T00:00:00+01:00", "2026-01-01 00:00:00Z"} {
		got, err := parseTime(v)
		want, werr := time.Parse(time.RFC3339Nano, v)
		if (err == nil) != (werr == nil) || !got.Equal(want) {
			t.Errorf("parseTime(%s) = %v, %v; time.Parse %v, %v", v, got, err, want, werr)
		}
	}
	r := rand.New(rand.NewPCG(5, 6))
	for range 100000 {
		y, mo := r.IntN(10000), 1+r.IntN(12)
		check(y, mo, 1+r.IntN(daysIn(mo, y)), r.IntN(24), r.IntN(60), r.IntN(60), r.IntN(1000000))
	}
}
