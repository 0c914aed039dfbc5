package webhook

import (
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"
)

// reloading holds a value loaded from files (the TLS key pair, the bearer token) and loads it
// again when one of the files changes, looking at most once per interval. Kubernetes updates
// a mounted Secret by swapping a symlink, cert-manager renews certificates in place: both
// show as a new modification time or size. A file that fails to load keeps the last good
// value (logged once per change), so a half-written update never locks the apiserver out.
type reloading[T any] struct {
	paths    []string
	load     func() (T, error)
	interval time.Duration
	log      *slog.Logger
	what     string

	mu    sync.Mutex
	val   T
	stamp string
	next  time.Time
}

// newReloading loads the value once; an error here is a startup error.
func newReloading[T any](what string, interval time.Duration, log *slog.Logger, load func() (T, error), paths ...string) (*reloading[T], error) {
	r := &reloading[T]{paths: paths, load: load, interval: interval, log: log, what: what}
	r.stamp = r.stampNow()
	v, err := load()
	if err != nil {
		return nil, err
	}
	r.val, r.next = v, time.Now().Add(interval)
	return r, nil
}

// stampNow identifies the files' current versions.
func (r *reloading[T]) stampNow() string {
	var s string
	for _, p := range r.paths {
		if fi, err := os.Stat(p); err == nil {
			s += fmt.Sprintf("%d/%d;", fi.ModTime().UnixNano(), fi.Size())
		} else {
			s += "missing;"
		}
	}
	return s
}

// get returns the current value, reloading it first if the files changed.
func (r *reloading[T]) get() T {
	r.mu.Lock()
	defer r.mu.Unlock()
	if now := time.Now(); now.After(r.next) {
		r.next = now.Add(r.interval)
		if stamp := r.stampNow(); stamp != r.stamp {
			r.stamp = stamp
			if v, err := r.load(); err != nil {
				r.log.Warn("changed file not loaded; keeping the previous one", "what", r.what, "err", err)
			} else {
				r.val = v
				r.log.Info("reloaded", "what", r.what)
			}
		}
	}
	return r.val
}
