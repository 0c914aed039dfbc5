package chdb

import (
	"bytes"
	"context"
	"database/sql/driver"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/auditlens/auditlens/lib/jsonstr"
)

// outputFormat is how results travel from the engine to the driver: one JSON array per
// row after a row of names and a row of types, so every value can be typed exactly.
const outputFormat = "JSONCompactEachRowWithNamesAndTypes"

// connector implements driver.Connector on the shared session for one default database.
type connector struct {
	s        *session
	database string
}

func (c *connector) Connect(context.Context) (driver.Conn, error) { return &conn{c: c}, nil }
func (c *connector) Driver() driver.Driver                        { return drv{} }

// drv exists because driver.Connector must name a Driver; it opens nothing by name.
type drv struct{}

func (drv) Open(string) (driver.Conn, error) {
	return nil, errors.New("chdb: open the database with chdb.Open, not sql.Open")
}

// conn is one database/sql connection; all share the process's chDB session.
type conn struct{ c *connector }

var (
	_ driver.QueryerContext                 = (*conn)(nil)
	_ driver.ExecerContext                  = (*conn)(nil)
	_ driver.Pinger                         = (*conn)(nil)
	_ driver.NamedValueChecker              = (*conn)(nil)
	_ driver.RowsColumnTypeDatabaseTypeName = (*rows)(nil)
)

func (c *conn) Prepare(q string) (driver.Stmt, error) { return &stmt{c: c, q: q}, nil }
func (c *conn) Close() error                          { return nil }
func (c *conn) Begin() (driver.Tx, error) {
	return nil, errors.New("chdb: transactions are not supported")
}

// CheckNamedValue accepts every argument as is: bind formats it.
func (c *conn) CheckNamedValue(*driver.NamedValue) error { return nil }

func (c *conn) Ping(ctx context.Context) error {
	_, _, err := c.run(ctx, "SELECT 1")
	return err
}

func (c *conn) run(ctx context.Context, q string) ([]byte, uint64, error) {
	if err := ctx.Err(); err != nil {
		return nil, 0, err
	}
	return c.c.s.query(c.c.database, q, outputFormat)
}

func (c *conn) ExecContext(ctx context.Context, q string, args []driver.NamedValue) (driver.Result, error) {
	q, err := bind(q, args)
	if err != nil {
		return nil, err
	}
	if _, _, err := c.run(ctx, q); err != nil {
		return nil, err
	}
	return driver.RowsAffected(0), nil
}

func (c *conn) QueryContext(ctx context.Context, q string, args []driver.NamedValue) (driver.Rows, error) {
	q, err := bind(q, args)
	if err != nil {
		return nil, err
	}
	out, _, err := c.run(ctx, q)
	if err != nil {
		return nil, err
	}
	return parseRows(out)
}

type stmt struct {
	c *conn
	q string
}

func (s *stmt) Close() error  { return nil }
func (s *stmt) NumInput() int { return -1 }
func (s *stmt) Exec(args []driver.Value) (driver.Result, error) {
	return s.c.ExecContext(context.Background(), s.q, named(args))
}
func (s *stmt) Query(args []driver.Value) (driver.Rows, error) {
	return s.c.QueryContext(context.Background(), s.q, named(args))
}
func (s *stmt) ExecContext(ctx context.Context, args []driver.NamedValue) (driver.Result, error) {
	return s.c.ExecContext(ctx, s.q, args)
}
func (s *stmt) QueryContext(ctx context.Context, args []driver.NamedValue) (driver.Rows, error) {
	return s.c.QueryContext(ctx, s.q, args)
}

func named(args []driver.Value) []driver.NamedValue {
	out := make([]driver.NamedValue, len(args))
	for i, a := range args {
		out[i] = driver.NamedValue{Ordinal: i + 1, Value: a}
	}
	return out
}

// rows holds a fully read result.
type rows struct {
	names, types []string
	lines        [][]byte
	i            int
}

func parseRows(out []byte) (*rows, error) {
	r := &rows{}
	lines := bytes.Split(bytes.TrimRight(out, "\n"), []byte("\n"))
	if len(out) == 0 || len(lines) < 2 {
		return r, nil // statements without a result set
	}
	if err := json.Unmarshal(lines[0], &r.names); err != nil {
		return nil, fmt.Errorf("chdb: result column names: %w", err)
	}
	if err := json.Unmarshal(lines[1], &r.types); err != nil {
		return nil, fmt.Errorf("chdb: result column types: %w", err)
	}
	r.lines = lines[2:]
	return r, nil
}

func (r *rows) Columns() []string                       { return r.names }
func (r *rows) Close() error                            { r.lines = nil; return nil }
func (r *rows) ColumnTypeDatabaseTypeName(i int) string { return r.types[i] }

func (r *rows) Next(dest []driver.Value) error {
	if r.i >= len(r.lines) {
		return io.EOF
	}
	line := r.lines[r.i]
	r.i++
	vals, err := splitArray(line)
	if err != nil {
		return fmt.Errorf("chdb: decode row: %w", err)
	}
	if len(vals) != len(r.names) {
		return fmt.Errorf("chdb: row has %d values for %d columns", len(vals), len(r.names))
	}
	for i, raw := range vals {
		v, err := convert(r.types[i], raw)
		if err != nil {
			return fmt.Errorf("chdb: column %s: %w", r.names[i], err)
		}
		dest[i] = v
	}
	return nil
}

// convert turns one JSON value of ClickHouse type typ into the Go value clickhouse-go
// would return for it, so the same Scan calls work on both engines.
func convert(typ string, raw []byte) (any, error) {
	typ = strings.TrimSpace(typ)
	if inner, ok := unwrap(typ, "Nullable"); ok {
		if string(raw) == "null" {
			return nil, nil
		}
		return convert(inner, raw)
	}
	if inner, ok := unwrap(typ, "LowCardinality"); ok {
		return convert(inner, raw)
	}
	if inner, ok := unwrap(typ, "Array"); ok {
		elems, err := splitArray(raw)
		if err != nil {
			return nil, err
		}
		return convertArray(inner, elems)
	}
	base, _, _ := strings.Cut(typ, "(")
	switch base {
	case "String", "FixedString", "UUID", "IPv4", "IPv6", "Enum8", "Enum16":
		return jsonstr.Unquote(raw)
	case "Bool":
		var b bool
		err := json.Unmarshal(raw, &b)
		return b, err
	case "UInt8", "UInt16", "UInt32", "UInt64":
		u, err := strconv.ParseUint(unquote(raw), 10, 64)
		if err != nil {
			return nil, err
		}
		switch base {
		case "UInt8":
			return uint8(u), nil
		case "UInt16":
			return uint16(u), nil
		case "UInt32":
			return uint32(u), nil
		}
		return u, nil
	case "Int8", "Int16", "Int32", "Int64":
		n, err := strconv.ParseInt(unquote(raw), 10, 64)
		if err != nil {
			return nil, err
		}
		switch base {
		case "Int8":
			return int8(n), nil
		case "Int16":
			return int16(n), nil
		case "Int32":
			return int32(n), nil
		}
		return n, nil
	case "Float32", "Float64":
		f, err := strconv.ParseFloat(unquote(raw), 64)
		if err != nil {
			return nil, err
		}
		if base == "Float32" {
			return float32(f), nil
		}
		return f, nil
	case "Date", "Date32":
		return parseTime(time.DateOnly, unquote(raw), time.UTC)
	case "DateTime", "DateTime64":
		loc := time.UTC
		if i := strings.IndexByte(typ, '\''); i >= 0 {
			name := strings.Trim(typ[i:strings.LastIndexByte(typ, '\'')+1], "'")
			if l, err := time.LoadLocation(name); err == nil {
				loc = l
			}
		}
		layout := time.DateTime
		if base == "DateTime64" {
			layout = "2006-01-02 15:04:05.999999999"
		}
		return parseTime(layout, unquote(raw), loc)
	}
	// Decimal, Tuple, Map and the rest: the JSON text as a string.
	return unquote(raw), nil
}

func convertArray(inner string, elems [][]byte) (any, error) {
	vals := make([]any, len(elems))
	for i, e := range elems {
		v, err := convert(inner, e)
		if err != nil {
			return nil, err
		}
		vals[i] = v
	}
	elemBase := inner
	if in, ok := unwrap(inner, "LowCardinality"); ok {
		elemBase = in
	}
	switch elemBase {
	case "String":
		out := make([]string, len(vals))
		for i, v := range vals {
			out[i] = v.(string)
		}
		return out, nil
	case "UInt64":
		out := make([]uint64, len(vals))
		for i, v := range vals {
			out[i] = v.(uint64)
		}
		return out, nil
	case "Int64":
		out := make([]int64, len(vals))
		for i, v := range vals {
			out[i] = v.(int64)
		}
		return out, nil
	case "Float64":
		out := make([]float64, len(vals))
		for i, v := range vals {
			out[i] = v.(float64)
		}
		return out, nil
	}
	return vals, nil
}

func unwrap(typ, wrapper string) (string, bool) {
	if strings.HasPrefix(typ, wrapper+"(") && strings.HasSuffix(typ, ")") {
		return typ[len(wrapper)+1 : len(typ)-1], true
	}
	return "", false
}

func unquote(raw []byte) string {
	if len(raw) >= 2 && raw[0] == '"' {
		if s, err := jsonstr.Unquote(raw); err == nil {
			return s
		}
	}
	return string(raw)
}

func parseTime(layout, s string, loc *time.Location) (time.Time, error) {
	t, err := time.ParseInLocation(layout, s, loc)
	if err != nil {
		return time.Time{}, err
	}
	return t, nil
}
