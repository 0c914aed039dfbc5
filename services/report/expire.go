package report

import (
	"context"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/auditlens/auditlens/services/report/store"
)

// expireEvery is how often the report service deletes what lies past the retention.
const expireEvery = time.Hour

// expirer runs store.Store.Expire at start and then every expireEvery: a daemon.Component.
// On servers with TTL it mostly finds nothing (TTL deleted it); on 18.16 it is the retention.
// Of the report processes that share a store, the one that holds its "expire" lease deletes
// (each deletion is a mutation the server runs over every part); another takes over when it
// stops.
type expirer struct {
	st    *store.Store
	log   *slog.Logger
	every time.Duration
	lease *store.Lease

	rows   *prometheus.CounterVec
	failed prometheus.Counter
}

func newExpirer(st *store.Store, log *slog.Logger, reg prometheus.Registerer) *expirer {
	e := &expirer{st: st, log: log, every: expireEvery, lease: st.Lease("expire", 3*expireEvery),
		rows: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "auditlens_report_expired_rows_total",
			Help: "Rows deleted for lying past the retention, by table, where TTL had not deleted them yet (or the server has no TTL)."}, []string{"table"}),
		failed: prometheus.NewCounter(prometheus.CounterOpts{Name: "auditlens_report_expire_errors_total",
			Help: "Runs of the retention's deletion that failed (the next one tries again)."}),
	}
	if reg != nil {
		reg.MustRegister(e.rows, e.failed)
	}
	return e
}

// Run deletes what is past the retention until ctx ends; a failure is logged and counted.
func (e *expirer) Run(ctx context.Context) error {
	t := time.NewTicker(e.every)
	defer t.Stop()
	defer e.release()
	for {
		// On a cluster a deletion is distributed DDL: a server down holds it, so it is bounded.
		rctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
		var done []store.Expired
		held, holder, err := e.lease.Hold(rctx)
		if held {
			done, err = e.st.Expire(rctx)
		} else if err == nil {
			e.log.Debug("another report process deletes what lies past the retention", "holder", holder)
		}
		cancel()
		for _, x := range done {
			e.rows.WithLabelValues(x.Table).Add(float64(x.Rows))
			e.log.Info("deleted rows past the retention", "table", x.Table, "rows", x.Rows, "before", x.Before.Format(time.DateOnly))
		}
		if err != nil && ctx.Err() == nil {
			e.failed.Inc()
			e.log.Warn("deleting rows past the retention failed; the next run tries again", "err", err, "retry_in", e.every)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// release gives the lease up when the service stops, so that another process takes it over
// at its next run.
func (e *expirer) release() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := e.lease.Release(ctx); err != nil {
		e.log.Warn("releasing the retention's lease failed; another process takes it over when it runs out", "err", err)
	}
}

// Ready implements daemon.Component: the retention never holds the service back.
func (e *expirer) Ready() error { return nil }
