package tail

import (
	"os"
)

// Lag: how far the audit log runs ahead of what was read, measured from any goroutine.

// updateLag publishes where the follower is for Lag.
func (t *Follower) updateLag() {
	c := t.cur
	if !c.final && !c.gz {
		if fi, err := c.f.Stat(); err == nil {
			c.size = fi.Size()
		}
	}
	t.at.Store(&readPoint{f: c.f, size: c.size, off: c.off, pending: c.pending, final: c.final, gz: c.gz, active: t.cfg.Path})
}

// readPoint is where the follower read last, for Lag from other goroutines.
type readPoint struct {
	f                  *os.File // may be closed by now: then size is used
	size, off, pending int64
	final, gz          bool
	active             string
}

// lag measures the bytes behind the read point now: the rest of the file being read (its
// current size unless it is finished or compressed), rotated files not read yet, and the
// active file when the one being read is an older one.
func (p *readPoint) lag() int64 {
	size, final := p.size, p.final
	var cur os.FileInfo
	if !p.final && !p.gz {
		if fi, err := p.f.Stat(); err == nil {
			size, cur = fi.Size(), fi
		} else {
			final = true // closed since: the reader finished it and moved on
		}
	}
	lag := size - p.off
	if p.gz || lag < 0 {
		lag = 0
	}
	if final {
		lag += p.pending
	}
	// The active file counts when it is not the one being read: the reader moves on to it
	// later (also after a rotation it has not noticed yet, being stopped).
	if fi, err := os.Stat(p.active); err == nil && (final || !os.SameFile(fi, cur)) {
		lag += fi.Size()
	}
	return lag
}

// Lag is how many bytes of the audit log lie beyond what the follower read, measured now
// (the log keeps growing while reading waits for the bus). Safe from any goroutine.
func (t *Follower) Lag() int64 {
	if at := t.at.Load(); at != nil {
		return at.lag()
	}
	return 0 // nothing opened yet
}
