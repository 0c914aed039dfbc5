package backlog

import "time"

// SetStallAfter shortens how long publishing may wait before readiness fails.
func (g *Gate) SetStallAfter(d time.Duration) { g.stallAfter = d }
