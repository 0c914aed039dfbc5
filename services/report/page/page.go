// Package page serves the weekly report as a web page from the running process, so a
// single-machine auditlens (whose embedded ClickHouse only one process may open) can be read
// while it runs: GET /report?target-version=1.33&week-ending=2026-11-29&format=html.
package page

import (
	"bytes"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/auditlens/auditlens/services/report/weekly"
	"github.com/auditlens/auditlens/services/report/weekly/render"
)

// Handler serves the weekly report of cluster from db.
type Handler struct {
	DB            *sql.DB
	Cluster       string
	DefaultTarget weekly.Version
	Log           *slog.Logger
	// Now is the clock (tests); nil means time.Now.
	Now func() time.Time
}

var contentTypes = map[string]string{
	"html": "text/html; charset=utf-8",
	"text": "text/plain; charset=utf-8",
	"json": "application/json",
	"csv":  "text/csv; charset=utf-8",
}

// ServeHTTP answers GET with the report; bad parameters get 400 with one sentence naming them.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "use GET", http.StatusMethodNotAllowed)
		return
	}
	now := time.Now
	if h.Now != nil {
		now = h.Now
	}
	q := r.URL.Query()
	o := weekly.Options{Cluster: h.Cluster, Target: h.DefaultTarget, WeekEnding: weekly.LastWeekEnding(now().UTC()), Now: now}
	if v := q.Get("cluster"); v != "" {
		o.Cluster = v
	}
	if v := q.Get("target-version"); v != "" {
		t, err := weekly.ParseVersion(v)
		if err != nil {
			http.Error(w, fmt.Sprintf("target-version %q: %v", v, err), http.StatusBadRequest)
			return
		}
		o.Target = t
	}
	if v := q.Get("week-ending"); v != "" {
		d, err := weekly.ParseDate(v)
		if err != nil {
			http.Error(w, fmt.Sprintf("week-ending %q: want YYYY-MM-DD", v), http.StatusBadRequest)
			return
		}
		if err := weekly.CheckWeekEnding(d); err != nil {
			http.Error(w, fmt.Sprintf("week-ending %s: %v", v, err), http.StatusBadRequest)
			return
		}
		o.WeekEnding = d
	}
	format := q.Get("format")
	if format == "" {
		format = "html"
	}
	ct, ok := contentTypes[format]
	if !ok {
		http.Error(w, fmt.Sprintf("format %q: want html, text, json or csv", format), http.StatusBadRequest)
		return
	}
	rep, err := weekly.Build(r.Context(), h.DB, o)
	if errors.Is(err, weekly.ErrInvalid) {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if err != nil {
		h.Log.Error("build weekly report", "err", err)
		http.Error(w, "the report could not be built; see the service log", http.StatusServiceUnavailable)
		return
	}
	var img render.Images
	if format == "html" {
		if img, err = render.DataImages(rep); err != nil {
			h.Log.Error("draw charts", "err", err)
		}
	}
	var buf bytes.Buffer
	if err := render.Write(&buf, format, rep, img); err != nil {
		h.Log.Error("render weekly report", "err", err)
		http.Error(w, "the report could not be rendered", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", ct)
	// The page embeds only its own inline styles and data: images.
	w.Header().Set("Content-Security-Policy", "default-src 'none'; img-src data:; style-src 'unsafe-inline'")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	_, _ = w.Write(buf.Bytes())
}
