package store

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"os"
	"sync"
	"time"
)

// Lease is one named lease of the table leases (migration 14): of the report processes that
// share a store, the one that holds it does a job that must run once per store, not once per
// replica (the rollup's compaction, the retention's deletion). Its holder renews it each time
// it does the job; when the holder stops (its lease released, or not renewed for TTL by the
// server's clock) the next process that asks takes it over.
//
// Two processes that ask at the same instant may both hold it for one round (each read back
// its own write before the other's arrived, possible on a cluster where the table is
// replicated asynchronously); the jobs it guards are safe to run twice, only wasteful.
type Lease struct {
	st   *Store
	name string
	ttl  time.Duration
	// id names this process's hold: the host name (the pod's) and a random part.
	id string

	mu   sync.Mutex
	last uint64 // the version of this process's newest row
}

// Lease returns the lease name of the store held for ttl past each renewal, held by this
// process under a new holder id.
func (s *Store) Lease(name string, ttl time.Duration) *Lease {
	host, _ := os.Hostname()
	var b [4]byte
	_, _ = rand.Read(b[:])
	return &Lease{st: s, name: name, ttl: ttl, id: fmt.Sprintf("%s/%s", host, hex.EncodeToString(b[:]))}
}

// Holder is this process's holder id.
func (l *Lease) Holder() string { return l.id }

// Hold reports whether this process holds the lease now: it renews it when it holds it,
// takes it when nobody does or its holder's time ran out, and otherwise leaves it. It also
// returns the holder it found.
func (l *Lease) Hold(ctx context.Context) (bool, string, error) {
	cur, err := l.read(ctx)
	if err != nil {
		return false, "", err
	}
	if cur.holder != "" && cur.holder != l.id && cur.until > cur.now {
		return false, cur.holder, nil
	}
	if err := l.write(ctx, l.id, cur.now+uint32(l.ttl/time.Second), cur); err != nil {
		return false, cur.holder, err
	}
	// Of two processes that took it at once, the row with the larger version holds it.
	cur, err = l.read(ctx)
	if err != nil {
		return false, "", err
	}
	return cur.holder == l.id, cur.holder, nil
}

// Release gives the lease up at once if this process holds it, so that another takes it
// over at its next round rather than after TTL.
func (l *Lease) Release(ctx context.Context) error {
	cur, err := l.read(ctx)
	if err != nil || cur.holder != l.id {
		return err
	}
	return l.write(ctx, "", cur.now, cur)
}

// state is what read found: the lease's holder and end (Unix seconds; "" and 0 for a lease
// never taken), the version of that row, and the server's clock.
type state struct {
	holder     string
	until, now uint32
	version    uint64
}

// read returns the lease's newest row and the server's clock.
func (l *Lease) read(ctx context.Context) (state, error) {
	var s state
	err := l.st.db.QueryRowContext(ctx, `SELECT argMax(holder, version), toUInt32(argMax(until, version)), max(version), toUInt32(now())
FROM `+l.st.Table("leases")+` WHERE lease = ?`, l.name).Scan(&s.holder, &s.until, &s.version, &s.now)
	if err != nil {
		return state{}, fmt.Errorf("read the lease %s: %w", l.name, err)
	}
	return s, nil
}

// write records holder until the Unix second until, under a version above the one read (cur)
// and every one this process wrote: the server's second, then random bits that order two
// processes' rows within one second.
func (l *Lease) write(ctx context.Context, holder string, until uint32, cur state) error {
	var b [4]byte
	if _, err := rand.Read(b[:]); err != nil {
		return err
	}
	r := uint64(binary.BigEndian.Uint32(b[:]) & (1<<24 - 1))
	l.mu.Lock()
	version := max(uint64(cur.now)<<24|r, cur.version+1+r%1024, l.last+1)
	l.last = version
	l.mu.Unlock()
	row := []any{l.name, holder, time.Unix(int64(until), 0).UTC(), version}
	if err := l.st.Insert(ctx, "leases", []string{"lease", "holder", "until", "version"}, [][]any{row}); err != nil {
		return fmt.Errorf("write the lease %s: %w", l.name, err)
	}
	return nil
}
