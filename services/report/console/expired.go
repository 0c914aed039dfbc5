package console

import (
	"context"
	"fmt"
	"time"

	"github.com/auditlens/auditlens/services/report/rollup"
)

// Expired is what a cluster sent when all of it lies before the retention's first day kept:
// the events of its minutes (classify's heartbeats count them; minutes are counts, kept
// longer). Their findings, which name callers, were deleted, or never written when they
// arrived already older than the retention (an imported log of past years).
type Expired struct {
	// RetentionDays is the retention of findings and callers (--retention-days).
	RetentionDays int `json:"retention_days"`
	// KeptFrom is the first UTC day kept.
	KeptFrom time.Time `json:"kept_from"`
	// Events is how many events the cluster sent, all before KeptFrom, in minutes First to Last.
	Events      uint64    `json:"events"`
	First, Last time.Time `json:"-"`
}

// String says it in one line, "" when nothing is to say: "14203 events of 2017 to 2019
// arrived, all older than the retention (--retention-days 400 keeps 2025-11-01 on; 0 keeps
// everything): their findings and callers were deleted at once".
func (e Expired) String() string {
	if e.Events == 0 {
		return ""
	}
	span := e.First.Format("2006")
	if y := e.Last.Format("2006"); y != span {
		span += " to " + y
	}
	return fmt.Sprintf("%d events of %s arrived, all older than the retention (--retention-days %d keeps %s on; 0 keeps everything): their findings and callers were deleted at once",
		e.Events, span, e.RetentionDays, e.KeptFrom.Format(time.DateOnly))
}

// Expired reads whether every event of cluster lies before the retention's first day kept, and
// what they were; the zero Expired when an event is kept, none came, or everything is kept.
func (r Reader) Expired(ctx context.Context, cluster string) (Expired, error) {
	t, err := r.table()
	if err != nil {
		return Expired{}, err
	}
	if cluster == "" {
		return Expired{}, invalid("cluster is empty")
	}
	from, days, err := rollup.KeptFrom(ctx, r.DB, rollup.TablesFor(t))
	if err != nil || days == 0 {
		return Expired{}, err
	}
	minutes := r.eventMinutes(t)
	var kept uint64
	if err := r.DB.QueryRowContext(ctx, `SELECT count() FROM (SELECT minute FROM `+minutes+` WHERE cluster = ? AND minute >= toDateTime(?) LIMIT 1)`,
		cluster, from.Unix()).Scan(&kept); err != nil {
		return Expired{}, fmt.Errorf("read the events kept: %w", err)
	}
	if kept > 0 {
		return Expired{}, nil
	}
	// A minute has one row per heartbeat that counted it until parts merge: its largest count.
	e := Expired{RetentionDays: days, KeptFrom: from}
	var first, last uint32
	if err := r.DB.QueryRowContext(ctx, `SELECT toUInt64(sum(e)), toUInt32(min(m)), toUInt32(max(m))
FROM (SELECT minute AS m, max(events) AS e FROM `+minutes+` WHERE cluster = ? GROUP BY m)`, cluster).Scan(&e.Events, &first, &last); err != nil {
		return Expired{}, fmt.Errorf("read the expired events: %w", err)
	}
	e.First, e.Last = time.Unix(int64(first), 0).UTC(), time.Unix(int64(last), 0).UTC()
	return e, nil
}
