package store

import (
	"context"
	"time"
)

// EventMinute is one minute of a cluster's audit stream that carried events (a row of
// event_minutes, from a classify heartbeat): Events of that minute seen by the classify that
// sent it so far.
type EventMinute struct {
	Cluster string
	Minute  time.Time
	Events  uint64
}

// EventMinuteColumns are the columns of event_minutes, in the order of WriteEventMinutes' rows.
var EventMinuteColumns = []string{"cluster", "minute", "events"}

// WriteEventMinutes inserts ms into event_minutes as one block. Writing a minute again, or
// with a smaller count, changes nothing that readers see (they take the largest count).
func (s *Store) WriteEventMinutes(ctx context.Context, ms []EventMinute) error {
	rows := make([][]any, len(ms))
	for i, m := range ms {
		rows[i] = []any{m.Cluster, m.Minute.UTC().Truncate(time.Minute), m.Events}
	}
	return s.Insert(ctx, "event_minutes", EventMinuteColumns, rows)
}
