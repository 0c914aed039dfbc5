package rollup

import (
	"context"
	"sync"
)

// A snapshot keeps, for the life of one context (a console page, one weekly report), the
// answers of the rollup's small reads that every read of the page asks again: the retention
// (KeptFrom), the server's recent days, each span's read plan and whether any caller moved.
// A page of two clusters asked them about 45 times a request, each a round trip of 3-9 ms on
// ClickHouse 18.16, many one after the other; with the snapshot each is asked once. It also
// makes the page's reads agree: they read the same builds even when a build lands meanwhile.
type snapshot struct {
	mu      sync.Mutex
	answers map[string]*answer
}

// answer is one read's result, read once: the first reader reads, the others wait for it.
type answer struct {
	once sync.Once
	v    any
	err  error
}

type snapshotKey struct{}

// Snapshot returns ctx with a snapshot of its own: the rollup's reads under it (Days, Moves,
// the lookups) read the retention, the read plans and the moved callers once each. Give it
// to what serves one request or builds one report, never to a long-lived context: the
// answers are kept as long as the context, and the builds a plan names are removed CleanAfter
// after a newer build replaced them.
func Snapshot(ctx context.Context) context.Context {
	if _, ok := ctx.Value(snapshotKey{}).(*snapshot); ok {
		return ctx
	}
	return context.WithValue(ctx, snapshotKey{}, &snapshot{answers: map[string]*answer{}})
}

// remember returns read's result for key, read once under ctx's snapshot (every time when
// ctx has none). An error is kept too: the page that met it fails as a whole.
func remember[T any](ctx context.Context, key string, read func() (T, error)) (T, error) {
	s, ok := ctx.Value(snapshotKey{}).(*snapshot)
	if !ok {
		return read()
	}
	s.mu.Lock()
	a := s.answers[key]
	if a == nil {
		a = &answer{}
		s.answers[key] = a
	}
	s.mu.Unlock()
	a.once.Do(func() { a.v, a.err = read() })
	v, _ := a.v.(T)
	return v, a.err
}
