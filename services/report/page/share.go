package page

import (
	"bytes"
	"context"
	"maps"
	"net/http"
	"strings"

	"github.com/auditlens/auditlens/services/report/access"
)

// share serves r, reading the store once for the requests that ask the same at the same
// time: the same method, path and query from the same user (access.Identity). The first
// reads (as serve: one MaxQueries slot, the deadline) and records its answer; those that
// arrive while it reads wait for it and get a copy, without a slot of their own. A team
// opening a link posted in a channel, or a dashboard's viewers refreshing at once, cost one
// read, not a 503 each past the bound. Nothing is kept once the read ends: a request after
// it reads again. A request of no named user reads alone.
//
// The shared read runs without its first client's cancellation (its deadline stays): the
// others still wait for it when that client leaves.
func (h *Handler) share(w http.ResponseWriter, r *http.Request, page func(w http.ResponseWriter, r *http.Request) error) {
	id, ok := access.Identity(r.Context())
	if !ok {
		h.serve(w, r, page)
		return
	}
	key := strings.Join([]string{id, r.Method, r.URL.Path, r.URL.RawQuery}, "\x00")
	h.asking.Add(1)
	defer h.asking.Add(-1)
	first := false
	v, _, _ := h.flight.Do(key, func() (any, error) {
		first = true
		rec := &recorder{header: http.Header{}}
		h.serve(rec, r.WithContext(context.WithoutCancel(r.Context())), page)
		return rec, nil
	})
	if !first {
		h.shared.Add(1)
	}
	v.(*recorder).replay(w)
}

// Shared counts the requests answered from another's read (share).
func (h *Handler) Shared() uint64 { return h.shared.Load() }

// recorder is an answer kept to be sent to every request that shared it.
type recorder struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (r *recorder) Header() http.Header { return r.header }

func (r *recorder) WriteHeader(status int) {
	if r.status == 0 {
		r.status = status
	}
}

func (r *recorder) Write(p []byte) (int, error) {
	r.WriteHeader(http.StatusOK)
	return r.body.Write(p)
}

// replay sends the recorded answer to w.
func (r *recorder) replay(w http.ResponseWriter) {
	maps.Copy(w.Header(), r.header.Clone())
	w.WriteHeader(max(r.status, http.StatusOK))
	_, _ = w.Write(r.body.Bytes())
}
