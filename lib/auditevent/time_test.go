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
		v := fmt.Sprintf("%04d-%02d-%02dT%02d:%02d:%02d.%06dZ", y, mo, d, h, mi, sec, us)
		got, err := parseTime(v)
		want := time.Date(y, time.Month(mo), d, h, mi, sec, us*1000, time.UTC)
		parsed, perr := time.Parse(time.RFC3339Nano, v)
		if err != nil || perr != nil || got != want || !got.Equal(parsed) {
			t.Fatalf("parseTime(%s) = %v, %v; want %v (time.Parse: %v, %v)", v, got, err, want, parsed, perr)
		}
	}
	for _, y := range []int{0, 1, 4, 99, 100, 399, 400, 1600, 1900, 1969, 1970, 1971, 2000, 2024, 2026, 2100, 9999} {
		for mo := 1; mo <= 12; mo++ {
			for d := 1; d <= daysIn(mo, y); d++ {
				check(y, mo, d, 23, 59, 59, 999999)
			}
		}
	}
	r := rand.New(rand.NewPCG(5, 6))
	for range 100000 {
		y, mo := r.IntN(10000), 1+r.IntN(12)
		check(y, mo, 1+r.IntN(daysIn(mo, y)), r.IntN(24), r.IntN(60), r.IntN(60), r.IntN(1000000))
	}
}
