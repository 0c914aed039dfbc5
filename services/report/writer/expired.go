package writer

import (
	"errors"
	"sync"
	"time"

	"github.com/auditlens/auditlens/services/report/store"
)

// expiredEvery is how often the writer logs what it dropped as older than the retention.
const expiredEvery = time.Minute

// expiredLog sums what arrived older than the retention between two log lines: an imported
// year-old log would otherwise log once per message.
type expiredLog struct {
	mu             sync.Mutex
	findings, sigs int
	oldest, newest time.Time
	logged         time.Time
}

// expiredOnArrival counts a finding (or, with sighting, a migration sighting) dated at that
// arrived older than the retention and is dropped, and logs the sums once every expiredEvery.
func (w *Writer) expiredOnArrival(cluster string, at time.Time, sighting bool) {
	kind := "finding"
	if sighting {
		kind = "migration_sighting"
	}
	w.m.expired.WithLabelValues(kind).Inc()
	e := &w.expired
	e.mu.Lock()
	defer e.mu.Unlock()
	if sighting {
		e.sigs++
	} else {
		e.findings++
	}
	if e.oldest.IsZero() || at.Before(e.oldest) {
		e.oldest = at
	}
	if at.After(e.newest) {
		e.newest = at
	}
	if now := time.Now(); now.Sub(e.logged) >= expiredEvery {
		w.log.Warn("findings older than the retention dropped on arrival: they would be deleted at once, and their rollups name callers (--retention-days; 0 keeps everything)",
			"retention_days", w.cfg.RetentionDays, "cluster", cluster, "findings", e.findings, "migration_sightings", e.sigs,
			"oldest", e.oldest.UTC().Format(time.RFC3339), "newest", e.newest.UTC().Format(time.RFC3339))
		e.findings, e.sigs, e.oldest, e.newest, e.logged = 0, 0, time.Time{}, time.Time{}, now
	}
}

// expiredAt reports whether err says a finding arrived older than the retention, and when
// the finding happened.
func expiredAt(err error) (time.Time, bool) {
	var e *store.ExpiredError
	if errors.As(err, &e) {
		return e.At, true
	}
	return time.Time{}, false
}
