// Package backoff is the one retry delay of every service: doubling from a minimum to a
// maximum, with jitter so that replicas that failed together do not retry together.
package backoff

import (
	"context"
	"math/rand/v2"
	"time"
)

// Backoff is a retry schedule: attempt 1 waits about Min, each next attempt twice as long,
// never more than Max. The zero value waits nothing.
type Backoff struct {
	Min, Max time.Duration
	// Jitter is the spread around each delay, as a fraction (0.2: +-20%). Zero means the
	// default, 0.2; a negative value means none (deterministic delays).
	Jitter float64
}

// Delay is the wait before retry number attempt (1 for the first retry).
func (b Backoff) Delay(attempt int) time.Duration {
	if b.Min <= 0 {
		return 0
	}
	attempt = max(attempt, 1)
	d := b.Min
	for i := 1; i < attempt && (b.Max <= 0 || d < b.Max); i++ {
		d *= 2
	}
	if b.Max > 0 && d > b.Max {
		d = b.Max
	}
	j := b.Jitter
	if j == 0 {
		j = 0.2
	}
	if j > 0 {
		d = time.Duration(float64(d) * (1 - j + 2*j*rand.Float64()))
	}
	return d
}

// Wait sleeps Delay(attempt), or returns ctx's error as soon as it is done.
func (b Backoff) Wait(ctx context.Context, attempt int) error {
	t := time.NewTimer(b.Delay(attempt))
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
