package page

import (
	"bytes"
	"context"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/auditlens/auditlens/services/report/access"
)

// share serves r, reading the store once for the requests that ask the same at the same
// time: the same method, path and query, from users the read's access decisions hold for.
// The first reads (as serve: one MaxQueries slot, the deadline), recording its answer and
// every access decision it made (access.Recording); those that arrive while it reads wait
// for it, without a slot of their own, and get a copy when their own authorizer decides each
// of those clusters the same (access.Decisions.SameFrom): a page is a function of what it asked,
// the store and those decisions only. A request decided otherwise joins another read of the
// same under way whose decisions hold for it, or begins one: on the cluster it names before
// it joins, on each other decision as the read makes it (most early, as a page checks its
// clusters before its heavy reads), and on all of them at the end. An answer never goes to a
// user it does not hold for. Users of two kinds asking at once read two pages side by side,
// but those share their reads of the store that are the same (console.Reads: the clusters
// both may see), so they cost about one. A team opening a link posted in a channel, or a
// dashboard's viewers refreshing at once, cost one read, not a 503 each past the bound. No
// page is kept once its read ends: a request after it reads again.
//
// A shared read runs without its first client's cancellation (its deadline stays): the
// others still wait for it when that client leaves.
func (h *Handler) share(w http.ResponseWriter, r *http.Request, page func(w http.ResponseWriter, r *http.Request) error) {
	// The store reads a page takes from other pages ended after its request arrived (serve).
	r = r.WithContext(context.WithValue(r.Context(), arrivedKey{}, time.Now()))
	key := strings.Join([]string{r.Method, r.URL.Path, r.URL.RawQuery}, "\x00")
	if cluster := r.URL.Query().Get("cluster"); cluster != "" {
		// The decision on the cluster asked for is known before any read: a user decided
		// otherwise does not wait for a read that cannot be theirs.
		ok, err := access.Allowed(r.Context(), cluster)
		if err != nil {
			h.serve(w, r, page) // the page meets the error again and answers it
			return
		}
		key += "\x00" + strconv.FormatBool(ok)
	}
	// A read whose decisions turn out not to hold for this request (made after it joined)
	// sends it round again, at once: to another read under way whose decisions hold, or its
	// own. Each round leaves a read of another kind; a few rounds, then it reads alone.
	for range maxRounds {
		c, compared, lead := h.join(key, r.Context())
		if lead {
			h.serve(c.rec, r.WithContext(c.ctx), page)
			h.leave(key, c)
			c.rec.replay(w)
			return
		}
		same, left := h.wait(r.Context(), c, compared)
		if left {
			return // the client left: nobody reads an answer
		}
		if same {
			h.shared.Add(1)
			c.rec.replay(w)
			return
		}
	}
	h.serve(w, r, page)
}

// arrivedKey is the context key of the time a request arrived (share).
type arrivedKey struct{}

// maxRounds bounds the reads a request joins before it reads alone (share).
const maxRounds = 4

// wait waits for c to end while its decisions hold for the user of ctx, comparing each
// decision from the from'th (those before it were compared when it joined) once as it is
// made; same: c's answer holds, left: ctx ended.
func (h *Handler) wait(ctx context.Context, c *flight, from int) (same, left bool) {
	defer h.asking.Add(-1)
	for {
		ok, next, changed := c.decisions.SameFrom(ctx, from)
		if !ok {
			return false, false
		}
		from = next
		select {
		case <-c.done:
			// The decisions made at its end too.
			ok, _, _ := c.decisions.SameFrom(ctx, from)
			return ok, false
		case <-changed:
		case <-ctx.Done():
			return false, true
		}
	}
}

// flight is a read under way that requests asking the same may share (share): its context
// records its access decisions, its answer is recorded, done closes when it is over.
type flight struct {
	ctx       context.Context
	decisions *access.Decisions
	rec       *recorder
	done      chan struct{}
}

// join finds a read of key under way whose decisions so far (compared: how many) hold for
// the user of ctx, else begins one (lead: the caller reads, then leaves). Either way the
// request is counted as asking until it leaves or its wait ends.
func (h *Handler) join(key string, ctx context.Context) (c *flight, compared int, lead bool) {
	h.flightMu.Lock()
	under := slices.Clone(h.flight[key])
	h.flightMu.Unlock()
	for _, c := range under {
		// Asked outside the lock: an authorizer may ask the apiserver.
		if same, n, _ := c.decisions.SameFrom(ctx, 0); same {
			h.asking.Add(1)
			return c, n, false
		}
	}
	c = &flight{rec: &recorder{header: http.Header{}}, done: make(chan struct{})}
	c.ctx, c.decisions = access.Recording(context.WithoutCancel(ctx))
	h.flightMu.Lock()
	defer h.flightMu.Unlock()
	if h.flight == nil {
		h.flight = map[string][]*flight{}
	}
	h.flight[key] = append(h.flight[key], c)
	h.asking.Add(1)
	return c, 0, true
}

// leave ends the read c of key: no request joins it any more, those waiting get its answer.
func (h *Handler) leave(key string, c *flight) {
	h.flightMu.Lock()
	defer h.flightMu.Unlock()
	h.flight[key] = slices.DeleteFunc(h.flight[key], func(f *flight) bool { return f == c })
	if len(h.flight[key]) == 0 {
		delete(h.flight, key)
	}
	h.asking.Add(-1)
	close(c.done)
}

// Shared counts the requests answered from another's read (share).
func (h *Handler) Shared() uint64 { return h.shared.Load() }

// SharedReads counts the store reads answered from another page's read of the same
// (console.Reads).
func (h *Handler) SharedReads() uint64 { return h.reads.Shared() }

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
