package readiness

import "time"

// SetClock makes g judge at now().
func SetClock(g *Gate, now func() time.Time) { g.now = now }
