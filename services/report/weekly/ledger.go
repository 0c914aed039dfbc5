package weekly

import (
	"context"
	"database/sql"
	"fmt"
	"time"
)

// Inserter writes rows into a table of the auditlens database (store.Store does): the only
// way to insert on both engines.
type Inserter interface {
	Insert(ctx context.Context, table string, columns []string, rows [][]any) error
}

// Statuses of a week in the ledger.
const (
	// StatusSending is recorded before the e-mail goes out: a week left in it (a crash while
	// sending) is not sent again automatically, so a restart never mails a week twice.
	StatusSending = "sending"
	// StatusSent is recorded once the SMTP server accepted the e-mail.
	StatusSent = "sent"
	// StatusFailed is recorded when sending failed: the week may be tried again.
	StatusFailed = "failed"
)

// LedgerTable is the store's table of sent weeks.
const LedgerTable = "weekly_reports"

// Ledger records which (cluster, week_ending, target_version) were mailed, in the
// weekly_reports table, so a week is sent once across restarts, replicas and CronJob reruns.
type Ledger struct {
	DB  *sql.DB
	Ins Inserter
}

// Entry is the latest state of one week.
type Entry struct {
	Status string
	At     time.Time
}

// Latest returns the latest entry of (cluster, week, target), or a zero Entry when the week
// was never tried. Among entries of the same second, sent wins over failed over sending.
func (l Ledger) Latest(ctx context.Context, cluster string, week Date, target Version) (Entry, error) {
	rows, err := l.DB.QueryContext(ctx, `SELECT status, toUInt32(sent_at) FROM `+LedgerTable+`
WHERE cluster = ? AND week_ending = toDate(?) AND target_version = ?`, cluster, week.String(), target.String())
	if err != nil {
		return Entry{}, fmt.Errorf("read %s: %w", LedgerTable, err)
	}
	defer rows.Close()
	rank := map[string]int{StatusSending: 1, StatusFailed: 2, StatusSent: 3}
	var best Entry
	for rows.Next() {
		var e Entry
		var at uint32
		if err := rows.Scan(&e.Status, &at); err != nil {
			return Entry{}, fmt.Errorf("read %s: %w", LedgerTable, err)
		}
		e.At = time.Unix(int64(at), 0).UTC()
		if best.Status == "" || e.At.After(best.At) || (e.At.Equal(best.At) && rank[e.Status] > rank[best.Status]) {
			best = e
		}
	}
	if err := rows.Err(); err != nil {
		return Entry{}, fmt.Errorf("read %s: %w", LedgerTable, err)
	}
	return best, nil
}

// Record appends status for (cluster, week, target) at time at.
func (l Ledger) Record(ctx context.Context, cluster string, week Date, target Version, recipients []string, status string, at time.Time) error {
	if recipients == nil {
		recipients = []string{}
	}
	row := []any{cluster, week.Time, target.String(), recipients, at.UTC().Truncate(time.Second), status}
	if err := l.Ins.Insert(ctx, LedgerTable, []string{"cluster", "week_ending", "target_version", "recipients", "sent_at", "status"}, [][]any{row}); err != nil {
		return fmt.Errorf("record week %s as %s: %w", week, status, err)
	}
	return nil
}
