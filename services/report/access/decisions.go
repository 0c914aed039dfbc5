package access

import (
	"context"
	"sync"
)

// Decisions are the access decisions a read made (Recording): which clusters its user was
// allowed or refused, in the order made. A page is a function of what it asked, the store
// and these decisions only, so its answer may go to another user whose authorizer decides
// the same (SameFrom).
type Decisions struct {
	mu     sync.Mutex
	made   []decision
	at     map[string]int // index in made by cluster
	failed bool
	// changed is closed, and replaced, when a decision is made or one fails.
	changed chan struct{}
}

type decision struct {
	cluster string
	ok      bool
}

// Recording returns ctx whose Allowed calls decide as ctx's authorizer does (and allow
// nothing without one) and are recorded in the Decisions returned. Its Identity is ctx's.
func Recording(ctx context.Context) (context.Context, *Decisions) {
	d := &Decisions{at: map[string]int{}, changed: make(chan struct{})}
	v, _ := ctx.Value(authorizerKey{}).(authorized)
	rec := AuthorizerFunc(func(ctx context.Context, cluster string) (bool, error) {
		ok, err := false, error(nil)
		if v.a != nil {
			ok, err = v.a.Allowed(ctx, cluster)
		}
		d.record(cluster, ok, err)
		return ok, err
	})
	return context.WithValue(ctx, authorizerKey{}, authorized{a: rec, id: v.id}), d
}

func (d *Decisions) record(cluster string, ok bool, err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	i, seen := d.at[cluster]
	switch {
	case err != nil, seen && d.made[i].ok != ok:
		// Nothing to compare an error with; a decision that changed during the read (a
		// cache expired) was read for neither answer alone.
		d.failed = true
	case seen:
		return
	default:
		d.at[cluster] = len(d.made)
		d.made = append(d.made, decision{cluster, ok})
	}
	close(d.changed)
	d.changed = make(chan struct{})
}

// SameFrom reports whether the user of ctx is decided as each decision made so far from the
// from'th on (those before it already compared): each cluster asked of ctx's authorizer again
// (its own cache answers those it knows). False when a recorded decision failed (an error:
// nothing to compare) or ctx's authorizer fails. It returns how many are compared now and a
// channel closed when more are made: a request waiting for a read asks it each time the
// channel closes, each decision once.
func (d *Decisions) SameFrom(ctx context.Context, from int) (same bool, next int, changed <-chan struct{}) {
	d.mu.Lock()
	failed, made, changed := d.failed, d.made[min(from, len(d.made)):], d.changed
	d.mu.Unlock()
	if failed {
		return false, from, changed
	}
	for _, m := range made {
		if ok, err := Allowed(ctx, m.cluster); err != nil || ok != m.ok {
			return false, from, changed
		}
	}
	return true, from + len(made), changed
}
