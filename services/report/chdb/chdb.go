// Package chdb runs the auditlens store on embedded ClickHouse (chDB): it loads libchdb.so
// on first use (never at program start, so a missing library is an error, not a panic),
// offers a database/sql driver with the same Scan types and positional ? arguments as
// clickhouse-go, and writes rows as JSONEachRow.
//
// chDB allows one session per process and one process per data directory: Open shares the
// process's session among all callers on the same directory and refuses another one.
// Queries are serialized on that session.
package chdb

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/auditlens/auditlens/services/report/store"
)

// session is the process's one chDB connection.
type session struct {
	dir  string
	conn *cConnection
	refs int

	// Queries run as "USE db; query": those on the same database run concurrently, a query
	// on another database waits until they are done.
	mu     sync.Mutex
	cond   *sync.Cond
	cur    string // database of the running queries
	active int
	closed bool
}

var (
	sessMu sync.Mutex
	sess   *session
)

// Open opens (or shares) the process's chDB session on dir and returns a store whose default
// database is database, created when missing. Close the store to release the session.
func Open(ctx context.Context, dir, database string) (*store.Store, error) {
	if err := store.ValidateIdent(database); err != nil {
		return nil, fmt.Errorf("database: %w", err)
	}
	s, err := acquire(dir)
	if err != nil {
		return nil, err
	}
	if _, _, err := s.query("", "CREATE DATABASE IF NOT EXISTS "+database, outputFormat); err != nil {
		release(s)
		return nil, fmt.Errorf("chdb: create database %s: %w", database, err)
	}
	db := sql.OpenDB(&connector{s: s, database: database})
	st, err := store.New(db, &backend{s: s, database: database}, database, nil)
	if err != nil {
		_ = db.Close()
		release(s)
		return nil, err
	}
	return st, nil
}

func acquire(dir string) (*session, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("chdb data dir %s: %w", dir, err)
	}
	sessMu.Lock()
	defer sessMu.Unlock()
	if sess != nil {
		if sess.dir != abs {
			return nil, fmt.Errorf("chdb: this process already has a session on %s; chDB allows one session per process", sess.dir)
		}
		sess.refs++
		return sess, nil
	}
	c, err := connect(abs)
	if err != nil {
		return nil, err
	}
	s := &session{dir: abs, conn: c, refs: 1}
	s.cond = sync.NewCond(&s.mu)
	// DateTime text is read and written in UTC, like the test server's.
	if _, _, err := s.query("", "SET session_timezone = 'UTC'", outputFormat); err != nil {
		cCloseConn(c)
		return nil, fmt.Errorf("chdb: set session time zone: %w", err)
	}
	sess = s
	return s, nil
}

func release(s *session) {
	sessMu.Lock()
	defer sessMu.Unlock()
	s.refs--
	if s.refs > 0 {
		return
	}
	s.mu.Lock()
	for s.active > 0 {
		s.cond.Wait()
	}
	s.closed = true
	cCloseConn(s.conn)
	s.conn = nil
	s.mu.Unlock()
	if sess == s {
		sess = nil
	}
}

func (s *session) query(database, q, format string) ([]byte, uint64, error) {
	if database != "" {
		q = "USE " + database + "; " + q
	}
	s.mu.Lock()
	for s.active > 0 && database != "" && s.cur != "" && s.cur != database {
		s.cond.Wait()
	}
	if s.closed {
		s.mu.Unlock()
		return nil, 0, errors.New("chdb: session closed")
	}
	if database != "" {
		s.cur = database
	}
	s.active++
	conn := s.conn
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.active--
		if s.active == 0 {
			s.cur = ""
		}
		s.cond.Broadcast()
		s.mu.Unlock()
	}()
	return query(conn, q, format)
}

// backend implements store.Backend with INSERT ... FORMAT TabSeparated (the text format
// chDB reads fastest; binary formats cannot pass through chdb_query's C string).
type backend struct {
	s        *session
	database string
	once     sync.Once

	mu    sync.Mutex
	types map[string]map[string]string // table -> column -> type
}

func (b *backend) Close() error {
	b.once.Do(func() { release(b.s) })
	return nil
}

func (b *backend) Insert(ctx context.Context, table string, columns []string, rows [][]any) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	types, err := b.columnTypes(table)
	if err != nil {
		return err
	}
	var buf bytes.Buffer
	buf.Grow(len(rows) * len(columns) * 16)
	buf.WriteString("INSERT INTO " + table + " (" + strings.Join(columns, ", ") + ") FORMAT TabSeparated\n")
	for _, r := range rows {
		if len(r) != len(columns) {
			return fmt.Errorf("row of %d values for %d columns", len(r), len(columns))
		}
		for i, v := range r {
			if i > 0 {
				buf.WriteByte('\t')
			}
			if err := writeTSV(&buf, v, types[columns[i]], false); err != nil {
				return fmt.Errorf("column %s: %w", columns[i], err)
			}
		}
		buf.WriteByte('\n')
	}
	_, _, err = b.s.query(b.database, buf.String(), outputFormat)
	return err
}

func (b *backend) columnTypes(table string) (map[string]string, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if t, ok := b.types[table]; ok {
		return t, nil
	}
	db, name, ok := strings.Cut(table, ".")
	if !ok {
		db, name = b.database, table
	}
	out, _, err := b.s.query("", "SELECT name, type FROM system.columns WHERE database = "+Quote(db)+" AND table = "+Quote(name), outputFormat)
	if err != nil {
		return nil, fmt.Errorf("read the columns of %s: %w", table, err)
	}
	rs, err := parseRows(out)
	if err != nil {
		return nil, err
	}
	t := map[string]string{}
	for _, line := range rs.lines {
		var kv [2]string
		if err := json.Unmarshal(line, &kv); err != nil {
			return nil, err
		}
		t[kv[0]] = kv[1]
	}
	if len(t) == 0 {
		return nil, fmt.Errorf("table %s does not exist", table)
	}
	if b.types == nil {
		b.types = map[string]map[string]string{}
	}
	b.types[table] = t
	return t, nil
}

// writeTSV writes v for a column of ClickHouse type typ in TabSeparated, or, inside an
// array (quoted), in the quoted form. Strings keep their bytes (ClickHouse strings are bytes,
// not UTF-8), with tab, newline, backslash and NUL escaped; times become a date for Date
// columns and Unix seconds otherwise.
func writeTSV(buf *bytes.Buffer, v any, typ string, quoted bool) error {
	switch v := v.(type) {
	case nil:
		buf.WriteString(`\N`)
	case string:
		writeTSVString(buf, v, quoted)
	case []byte:
		writeTSVString(buf, string(v), quoted)
	case bool:
		if v {
			buf.WriteByte('1')
		} else {
			buf.WriteByte('0')
		}
	case time.Time:
		if strings.Contains(typ, "Date") && !strings.Contains(typ, "DateTime") {
			if quoted {
				buf.WriteByte('\'')
			}
			buf.WriteString(v.UTC().Format(time.DateOnly))
			if quoted {
				buf.WriteByte('\'')
			}
		} else {
			buf.WriteString(strconv.FormatInt(v.Unix(), 10))
		}
	case []string:
		buf.WriteByte('[')
		for i, s := range v {
			if i > 0 {
				buf.WriteByte(',')
			}
			writeTSVString(buf, s, true)
		}
		buf.WriteByte(']')
	default:
		rv := reflect.ValueOf(v)
		switch rv.Kind() {
		case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
			buf.WriteString(strconv.FormatInt(rv.Int(), 10))
		case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
			buf.WriteString(strconv.FormatUint(rv.Uint(), 10))
		case reflect.Float32, reflect.Float64:
			buf.WriteString(strconv.FormatFloat(rv.Float(), 'g', -1, 64))
		case reflect.String:
			writeTSVString(buf, rv.String(), quoted)
		case reflect.Slice, reflect.Array:
			elem := typ
			if strings.HasPrefix(elem, "Array(") {
				elem = elem[len("Array(") : len(elem)-1]
			}
			buf.WriteByte('[')
			for i := 0; i < rv.Len(); i++ {
				if i > 0 {
					buf.WriteByte(',')
				}
				if err := writeTSV(buf, rv.Index(i).Interface(), elem, true); err != nil {
					return err
				}
			}
			buf.WriteByte(']')
		default:
			return fmt.Errorf("unsupported value type %T", v)
		}
	}
	return nil
}

// writeTSVString escapes s for TabSeparated; quoted wraps it in single quotes (array
// elements) and escapes the quote too.
func writeTSVString(buf *bytes.Buffer, s string, quoted bool) {
	if quoted {
		buf.WriteByte('\'')
	}
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '\\':
			buf.WriteString(`\\`)
		case '\t':
			buf.WriteString(`\t`)
		case '\n':
			buf.WriteString(`\n`)
		case '\r':
			buf.WriteString(`\r`)
		case 0:
			buf.WriteString(`\0`)
		case '\'':
			if quoted {
				buf.WriteString(`\'`)
			} else {
				buf.WriteByte(c)
			}
		default:
			buf.WriteByte(c)
		}
	}
	if quoted {
		buf.WriteByte('\'')
	}
}
