package cloudwatch

// Written is the bytes of position files saved so far and the largest one.
func (s *Source) Written() (total, largest int64) { return s.store.written, s.store.largest }

// Bound is Position.bound.
func (p *Position) Bound(max int) int { return p.bound(max) }
