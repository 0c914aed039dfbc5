// Package page is the web console of a running auditlens, on its own listeners (loopback:
// --report-console-addr; authenticated: --report-console-auth-addr), not the metrics address:
// the clusters seen at /, the weekly report with its controls at /report (also as
// text, JSON and CSV), and the drill-down from a blocker to its callers (/callers), from a
// caller to its requests (/requests), one request (/request), and a search (/search). Plain
// HTML and forms, no script; html/template escapes every value taken from audit events,
// every query parameter is checked (a 400 names it), every list is bounded.
package page

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"log/slog"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/auditlens/auditlens/services/report/console"
	"github.com/auditlens/auditlens/services/report/weekly"
)

// Handler serves the console over the findings in DB. As an http.Handler it is the report
// page alone (GET /report?target-version=1.33&week-ending=2026-11-29&format=html); Register
// adds every page to a mux.
type Handler struct {
	DB *sql.DB
	// Cluster is the cluster shown when a request names none.
	Cluster string
	// DefaultTarget is the target version when a request names none; zero means the newest
	// of Releases.
	DefaultTarget weekly.Version
	// Releases are the Kubernetes releases the rule catalogue names: the target versions
	// offered, with those the cluster's findings name.
	Releases []weekly.Version
	// Table holding the findings; default "findings" (in the connection's database).
	Table string
	Log   *slog.Logger
	// Now is the clock (tests); nil means time.Now.
	Now func() time.Time
	// Limits bound the lookback, the requests reading at once and their deadline.
	Limits Limits
	// Deadline returns ctx ending after d and telling the store so (store.WithDeadline);
	// nil: a plain context deadline.
	Deadline func(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc)
	// Accept returns the accepted risks of a cluster in force (nil: none): /report lists the
	// blockers they accept apart.
	Accept func(cluster string) weekly.Acceptor
	// Owners returns the owners in force (nil: no owners file): /report?team=NAME shows one
	// team's callers.
	Owners func() TeamFilter

	semOnce sync.Once
	sem     chan struct{}
	// flight (the reads under way by what they ask), shared and asking (the requests
	// reading or waiting for a shared read now): see share.
	flightMu sync.Mutex
	flight   map[string][]*flight
	shared   atomic.Uint64
	asking   atomic.Int64
	// reads are the store reads under way that pages read at the same time share.
	reads console.Reads
}

// CSP is the pages' Content-Security-Policy: nothing loads but their own inline styles and
// data: images, no script runs, and forms submit only to the console itself.
const CSP = "default-src 'none'; img-src data:; style-src 'unsafe-inline'; form-action 'self'"

// Register serves the console's pages on mux: /, /report, /callers, /requests, /request and
// /search. Any other path stays the mux's (404 unless registered elsewhere).
func (h *Handler) Register(mux *http.ServeMux) {
	mux.Handle("/{$}", h.get(h.index))
	mux.Handle("/report", h)
	mux.Handle("/callers", h.get(h.callers))
	mux.Handle("/requests", h.get(h.requests))
	mux.Handle("/request", h.get(h.request))
	mux.Handle("/search", h.get(h.search))
}

// ServeHTTP answers GET /report with the report; bad parameters get 400 with one sentence
// naming them.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) { h.get(h.report).ServeHTTP(w, r) }

// get adapts a page to a handler of GET and HEAD that answers its error: 400 for a bad
// request, 403 for a cluster the user may not read, 404 for an unknown cluster, else 503
// (logged). At most Limits.MaxQueries pages run at once (beyond: 503 with Retry-After at
// once), each within Limits.QueryTimeout; requests asking the same as one already reading
// share its answer (share).
func (h *Handler) get(page func(w http.ResponseWriter, r *http.Request) error) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "use GET", http.StatusMethodNotAllowed)
			return
		}
		h.share(w, r, page)
	})
}

// serve reads and answers one page: within the MaxQueries bound and the deadline, its
// errors answered as get says.
func (h *Handler) serve(w http.ResponseWriter, r *http.Request, page func(w http.ResponseWriter, r *http.Request) error) {
	release, ok := h.admit()
	if !ok {
		busy(w)
		return
	}
	defer release()
	ctx, cancel := h.deadline(r.Context())
	defer cancel()
	// The page's reads share one snapshot of the rollup's plans: they read the same
	// builds, and ask for them once.
	// Pages read at the same time for users decided otherwise (so not shared as a whole)
	// still share the store reads they have in common (the clusters both may see): those
	// under way, and those that ended after the request arrived.
	arrived, _ := r.Context().Value(arrivedKey{}).(time.Time)
	err := page(w, r.WithContext(console.Snapshot(console.Shared(ctx, &h.reads, arrived))))
	var bp paramError
	var nf notFoundError
	switch {
	case err == nil:
	case errors.As(err, &bp), errors.Is(err, console.ErrInvalid), errors.Is(err, weekly.ErrInvalid):
		http.Error(w, err.Error(), http.StatusBadRequest)
	case errors.Is(err, errForbidden):
		http.Error(w, err.Error(), http.StatusForbidden)
	case errors.As(err, &nf):
		nf.write(w)
	case r.Context().Err() != nil:
		// The client left: nobody reads an answer.
	case errors.Is(err, context.DeadlineExceeded) || ctx.Err() != nil:
		h.log().Warn("console page over its deadline", "path", r.URL.Path, "deadline", h.Limits.QueryTimeout, "err", err)
		w.Header().Set("Retry-After", "5")
		http.Error(w, "reading the findings took longer than the console allows; narrow the window or retry", http.StatusServiceUnavailable)
	default:
		h.log().Error("serve console page", "path", r.URL.Path, "err", err)
		http.Error(w, "the findings could not be read; see the service log", http.StatusServiceUnavailable)
	}
}

func (h *Handler) log() *slog.Logger {
	if h.Log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return h.Log
}

func (h *Handler) now() time.Time {
	if h.Now != nil {
		return h.Now().UTC()
	}
	return time.Now().UTC()
}

func (h *Handler) reader() console.Reader { return console.Reader{DB: h.DB, Table: h.Table} }

// write sends body with the headers every page has.
func write(w http.ResponseWriter, contentType string, body *bytes.Buffer) {
	w.Header().Set("Content-Type", contentType)
	w.Header().Set("Content-Security-Policy", CSP)
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Referrer-Policy", "no-referrer")
	_, _ = w.Write(body.Bytes())
}

// targets are the target versions offered: the catalogue's releases, those named by the
// findings (extra) and the selected one, oldest first.
func (h *Handler) targets(selected weekly.Version, extra ...weekly.Version) []weekly.Version {
	vs := append(append(slices.Clone(h.Releases), extra...), selected)
	if !h.DefaultTarget.IsZero() {
		vs = append(vs, h.DefaultTarget)
	}
	slices.SortFunc(vs, func(a, b weekly.Version) int { return a.Key() - b.Key() })
	return slices.CompactFunc(vs, func(a, b weekly.Version) bool { return a == b })
}

// defaultTarget is the target when neither the request nor the cluster's version names one:
// the newest of Releases, else DefaultTarget.
func (h *Handler) defaultTarget() weekly.Version {
	if len(h.Releases) == 0 {
		return h.DefaultTarget
	}
	return slices.MaxFunc(h.Releases, func(a, b weekly.Version) int { return a.Key() - b.Key() })
}
