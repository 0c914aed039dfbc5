package weekly

import (
	"context"
	"database/sql"
	"time"
)

// Phases times the queries of Build one by one (for the benchmark's breakdown).
func Phases(ctx context.Context, db *sql.DB, o Options) (trendTime, blockersTime time.Duration, err error) {
	if err := o.Validate(); err != nil {
		return 0, 0, err
	}
	end := o.WeekEnding.AddDate(0, 0, 1)
	r := &Report{WeekStart: end.AddDate(0, 0, -7), WeekEnd: end}
	t0 := time.Now()
	if err := trend(ctx, db, o, r); err != nil {
		return 0, 0, err
	}
	t1 := time.Now()
	if err := blockers(ctx, db, o, r); err != nil {
		return 0, 0, err
	}
	return t1.Sub(t0), time.Since(t1), nil
}
