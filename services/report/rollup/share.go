package rollup

import (
	"context"
	"database/sql"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Row is one row of a read's answer as Query hands it to its caller: a row of the store's
// answer (*sql.Rows), or the same row replayed from a read another request made (Reads).
type Row interface {
	Scan(dest ...any) error
}

// Reads lets the requests of one process that ask the store the same read it once
// (Shared): the console's users of two kinds, one allowed a cluster the other is not, ask
// different pages but the same reads of the clusters both may see, side by side. A read is
// the same when its name, its SQL and its arguments are; the first asking reads and records
// the rows its caller scanned, the others asking while it reads wait for it and scan the
// recorded rows. A request also takes the answer of a read that ended after it arrived (it
// was under way while the request was): a page begun a little after another, as the second
// kind's is (it reads once it knows it is decided otherwise), meets the first one's reads
// ended. An answer is never of a read that ended before its request arrived, and is kept at
// most Keep. Two reads of the same SQL at the same moment answer the same (the builds named
// in it are fixed, the hours not built are read as they are at that moment): sharing one
// changes no answer but by the moments it was read at, all within the request's time. Nor
// does it give a user more: a request takes only the answer of a read it asks itself, which
// its page uses (and filters by its user's access) as it would its own.
//
// The zero value is ready to use.
type Reads struct {
	mu    sync.Mutex
	under map[string]*sharedRead
	// ended are the answers of reads that ended (without error) in the last Keep, by key,
	// oldest first in order.
	ended  map[string]*sharedRead
	order  []string
	shared atomic.Uint64
}

// Keep bounds how long an ended read's answer is kept for the requests that arrived while it
// was under way (Reads); MaxEnded bounds how many are kept.
const (
	Keep     = 10 * time.Second
	MaxEnded = 256
)

// sharedRead is one read: done closes when rows, err and end are final; waiting counts the
// requests that joined it while it was under way (under Reads.mu).
type sharedRead struct {
	done    chan struct{}
	rows    [][]any
	err     error
	end     time.Time
	waiting int
}

type readsKey struct{}

// sharing is what a context given Shared carries: the reads and when its request arrived.
type sharing struct {
	reads   *Reads
	arrived time.Time
}

// Shared returns ctx under which Query shares its reads through s (nil s: ctx unchanged)
// for a request that arrived at arrived (zero: now): it takes the answers of reads that
// ended after that.
func Shared(ctx context.Context, s *Reads, arrived time.Time) context.Context {
	if s == nil {
		return ctx
	}
	if arrived.IsZero() {
		arrived = time.Now()
	}
	return context.WithValue(ctx, readsKey{}, sharing{reads: s, arrived: arrived})
}

// Shared counts the reads answered from another request's read (Reads).
func (s *Reads) Shared() uint64 { return s.shared.Load() }

// query runs one read of Query under s for a request that arrived at arrived: a read of key
// under way is waited for, one that ended after arrived is taken, else it reads (through
// read, recording the rows f scans). A read that failed (its deadline, a server error) is
// read again by each waiting request under its own context, so none gets another's error.
func (s *Reads) query(ctx context.Context, arrived time.Time, key string, read func(f func(Row) error) error, f func(Row) error) error {
	s.mu.Lock()
	r, waiting := s.under[key]
	switch e := s.ended[key]; {
	case waiting:
		r.waiting++
	case e != nil && !e.end.Before(arrived):
		s.mu.Unlock()
		return s.replay(e, f)
	default:
		if s.under == nil {
			s.under = map[string]*sharedRead{}
		}
		r = &sharedRead{done: make(chan struct{})}
		s.under[key] = r
	}
	s.mu.Unlock()
	if waiting {
		select {
		case <-r.done:
		case <-ctx.Done():
			return ctx.Err()
		}
		if r.err != nil {
			return read(f)
		}
		return s.replay(r, f)
	}
	defer s.end(key, r)
	r.err = read(func(row Row) error {
		rec := &recording{Row: row}
		err := f(rec)
		if rec.vals != nil {
			r.rows = append(r.rows, rec.vals)
		}
		return err
	})
	return r.err
}

// replay calls f for each row of the ended read r.
func (s *Reads) replay(r *sharedRead, f func(Row) error) error {
	s.shared.Add(1)
	for _, vals := range r.rows {
		if err := f(replayed(vals)); err != nil {
			return err
		}
	}
	return nil
}

// end ends the read r of key: those waiting get its answer, and (read without error) it is
// kept for the requests that arrived while it was under way; answers older than Keep, and
// the oldest past MaxEnded, are dropped.
func (s *Reads) end(key string, r *sharedRead) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r.end = time.Now()
	delete(s.under, key)
	close(r.done)
	if r.err == nil {
		if s.ended == nil {
			s.ended = map[string]*sharedRead{}
		}
		if _, again := s.ended[key]; again {
			s.order = slices.DeleteFunc(s.order, func(k string) bool { return k == key })
		}
		s.ended[key] = r
		s.order = append(s.order, key)
	}
	drop := 0
	for drop < len(s.order) && (len(s.order)-drop > MaxEnded || r.end.Sub(s.ended[s.order[drop]].end) > Keep) {
		delete(s.ended, s.order[drop])
		drop++
	}
	s.order = slices.Delete(s.order, 0, drop)
}

// readKey is what makes two reads the same: the name, the SQL (before Bounded: requests'
// deadlines differ) and the arguments with their types.
func readKey(what, q string, args []any) string {
	var b strings.Builder
	b.WriteString(what)
	b.WriteByte(0)
	b.WriteString(q)
	for _, a := range args {
		fmt.Fprintf(&b, "\x00%T:%v", a, a)
	}
	return b.String()
}

// recording is a row of the store's answer that keeps the values its caller scanned.
type recording struct {
	Row
	vals []any
}

func (r *recording) Scan(dest ...any) error {
	if err := r.Row.Scan(dest...); err != nil {
		return err
	}
	r.vals = make([]any, len(dest))
	for i, d := range dest {
		r.vals[i] = copied(reflect.ValueOf(d).Elem()).Interface()
	}
	return nil
}

// copied is v, or a copy of it when it is a slice: a recorded value is nobody else's.
func copied(v reflect.Value) reflect.Value {
	if v.Kind() != reflect.Slice || v.IsNil() {
		return v
	}
	c := reflect.MakeSlice(v.Type(), v.Len(), v.Len())
	reflect.Copy(c, v)
	return c
}

// replayed is a recorded row: Scan sets each destination to the value the first reader's
// destination of the same place received. The same name and SQL come from one call site, so
// the destinations have the same types; a slice is copied, so no two requests share one.
type replayed []any

func (r replayed) Scan(dest ...any) error {
	if len(dest) != len(r) {
		return fmt.Errorf("replay a shared read: %d destinations for %d values", len(dest), len(r))
	}
	for i, d := range dest {
		to := reflect.ValueOf(d)
		if to.Kind() != reflect.Pointer || to.IsNil() {
			return fmt.Errorf("replay a shared read: destination %d is not a pointer", i)
		}
		v := reflect.ValueOf(r[i])
		if !v.IsValid() {
			to.Elem().SetZero()
			continue
		}
		if !v.Type().AssignableTo(to.Elem().Type()) {
			return fmt.Errorf("replay a shared read: value %d is %s, destination %s", i, v.Type(), to.Elem().Type())
		}
		to.Elem().Set(copied(v))
	}
	return nil
}

// Query runs q (Bounded) and calls f for each row; what names the query in errors. Under a
// context given Reads (Shared), a read asked by several requests at once runs once.
func Query(ctx context.Context, db *sql.DB, what, q string, args []any, f func(Row) error) error {
	read := func(f func(Row) error) error { return query(ctx, db, what, q, args, f) }
	if sh, ok := ctx.Value(readsKey{}).(sharing); ok {
		return sh.reads.query(ctx, sh.arrived, readKey(what, q, args), read, f)
	}
	return read(f)
}

// query runs q (Bounded) and calls f for each row; what names the query in errors.
func query(ctx context.Context, db *sql.DB, what, q string, args []any, f func(Row) error) error {
	rs, err := db.QueryContext(ctx, Bounded(ctx, q), args...)
	if err != nil {
		return fmt.Errorf("query %s: %w", what, err)
	}
	defer rs.Close()
	for rs.Next() {
		if err := f(rs); err != nil {
			return fmt.Errorf("read %s: %w", what, err)
		}
	}
	if err := rs.Err(); err != nil {
		return fmt.Errorf("read %s: %w", what, err)
	}
	return nil
}
