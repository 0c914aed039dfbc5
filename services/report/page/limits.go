package page

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"strconv"
	"time"
)

// Limits bound what the console reads and asks of the store.
type Limits struct {
	// Lookback is the window the first screen and a report without a week look at: the
	// days before now for a live cluster, before its newest event for an imported log.
	Lookback time.Duration
	// MaxQueries is how many console requests read the store at once; one more gets 503
	// with Retry-After at once.
	MaxQueries int
	// QueryTimeout bounds each request's reading (ClickHouse's max_execution_time and the
	// request's context).
	QueryTimeout time.Duration
}

// DefaultLimits: 30 days (as EKS Upgrade Insights looks back), 2 requests at once (a heavy
// page keeps a core of ClickHouse busy), 5 s.
func DefaultLimits() Limits {
	return Limits{Lookback: 30 * 24 * time.Hour, MaxQueries: 2, QueryTimeout: 5 * time.Second}
}

// RegisterFlags registers --report-lookback, --report-console-max-queries and
// --report-console-query-timeout.
func (l *Limits) RegisterFlags(fs *flag.FlagSet) {
	fs.DurationVar(&l.Lookback, "report-lookback", l.Lookback, "window of the console's first screen: this long before now (a live cluster) or before the cluster's newest event (an imported log)")
	fs.IntVar(&l.MaxQueries, "report-console-max-queries", l.MaxQueries, "console requests reading the store at once; beyond them 503 with Retry-After")
	fs.DurationVar(&l.QueryTimeout, "report-console-query-timeout", l.QueryTimeout, "deadline of a console request's queries (ClickHouse max_execution_time and the request's context)")
}

// Validate checks l and never changes it.
func (l Limits) Validate() error {
	if l.Lookback < 24*time.Hour || l.Lookback > 400*24*time.Hour {
		return fmt.Errorf("--report-lookback %s: want 24h to 9600h", l.Lookback)
	}
	if l.MaxQueries < 1 {
		return fmt.Errorf("--report-console-max-queries %d: want 1 or more", l.MaxQueries)
	}
	if l.QueryTimeout < 100*time.Millisecond {
		return fmt.Errorf("--report-console-query-timeout %s: want 100ms or more", l.QueryTimeout)
	}
	return nil
}

// errBusy is a request over MaxQueries.
var errBusy = errors.New("the console is answering as many requests as it may; retry in a second")

// admit takes one of the MaxQueries slots without waiting; release gives it back.
func (h *Handler) admit() (release func(), ok bool) {
	h.semOnce.Do(func() {
		n := h.Limits.MaxQueries
		if n <= 0 {
			n = DefaultLimits().MaxQueries
		}
		h.sem = make(chan struct{}, n)
	})
	select {
	case h.sem <- struct{}{}:
		return func() { <-h.sem }, true
	default:
		return nil, false
	}
}

// busy answers a request over the bound: 503 with Retry-After, no store read.
func busy(w http.ResponseWriter) {
	w.Header().Set("Retry-After", strconv.Itoa(1))
	http.Error(w, errBusy.Error(), http.StatusServiceUnavailable)
}

// deadline bounds the request's reading: Limits.QueryTimeout through Deadline (the
// store's, which also tells ClickHouse), else a plain context deadline.
func (h *Handler) deadline(ctx context.Context) (context.Context, context.CancelFunc) {
	d := h.Limits.QueryTimeout
	if d <= 0 {
		d = DefaultLimits().QueryTimeout
	}
	if h.Deadline != nil {
		return h.Deadline(ctx, d)
	}
	return context.WithTimeout(ctx, d)
}
