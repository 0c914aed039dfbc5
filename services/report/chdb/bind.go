package chdb

import (
	"database/sql/driver"
	"fmt"
	"math"
	"reflect"
	"strconv"
	"strings"
	"time"
)

// bind replaces each '?' outside string literals, quoted identifiers and comments with the
// ClickHouse literal of the next argument, the way clickhouse-go binds positional arguments
// for the native protocol; "\?" stands for a literal '?'.
func bind(query string, args []driver.NamedValue) (string, error) {
	if len(args) == 0 {
		return query, nil
	}
	for _, a := range args {
		if a.Name != "" {
			return "", fmt.Errorf("chdb: named argument %q: use positional ? arguments", a.Name)
		}
	}
	var b strings.Builder
	b.Grow(len(query) + 16*len(args))
	next := 0
	for i := 0; i < len(query); i++ {
		c := query[i]
		switch {
		case c == '\'' || c == '"' || c == '`':
			j := skipQuoted(query, i, c)
			b.WriteString(query[i:j])
			i = j - 1
		case c == '-' && i+1 < len(query) && query[i+1] == '-':
			j := strings.IndexByte(query[i:], '\n')
			if j < 0 {
				j = len(query) - i
			}
			b.WriteString(query[i : i+j])
			i += j - 1
		case c == '/' && i+1 < len(query) && query[i+1] == '*':
			j := strings.Index(query[i+2:], "*/")
			end := len(query)
			if j >= 0 {
				end = i + 2 + j + 2
			}
			b.WriteString(query[i:end])
			i = end - 1
		case c == '\\' && i+1 < len(query) && query[i+1] == '?':
			b.WriteByte('?')
			i++
		case c == '?':
			if next >= len(args) {
				return "", fmt.Errorf("chdb: query has more ? than the %d arguments given", len(args))
			}
			lit, err := Literal(args[next].Value)
			if err != nil {
				return "", fmt.Errorf("chdb: argument %d: %w", next+1, err)
			}
			b.WriteString(lit)
			next++
		default:
			b.WriteByte(c)
		}
	}
	if next != len(args) {
		return "", fmt.Errorf("chdb: %d arguments given for %d ? in the query", len(args), next)
	}
	return b.String(), nil
}

// skipQuoted returns the index just past the quoted section starting at query[i].
func skipQuoted(query string, i int, q byte) int {
	for j := i + 1; j < len(query); j++ {
		switch query[j] {
		case '\\':
			j++
		case q:
			if j+1 < len(query) && query[j+1] == q { // doubled quote
				j++
				continue
			}
			return j + 1
		}
	}
	return len(query)
}

var quoter = strings.NewReplacer(`\`, `\\`, `'`, `\'`, "\x00", `\0`)

// Quote returns s as a ClickHouse string literal.
func Quote(s string) string { return "'" + quoter.Replace(s) + "'" }

// Literal formats v as a ClickHouse SQL literal: strings quoted and escaped, times as
// toDateTime in UTC, slices as arrays, nil as NULL.
func Literal(v any) (string, error) {
	if vr, ok := v.(driver.Valuer); ok {
		var err error
		if v, err = vr.Value(); err != nil {
			return "", err
		}
	}
	switch v := v.(type) {
	case nil:
		return "NULL", nil
	case string:
		return Quote(v), nil
	case []byte:
		return Quote(string(v)), nil
	case bool:
		if v {
			return "1", nil
		}
		return "0", nil
	case time.Time:
		if v.IsZero() {
			return "toDateTime(0, 'UTC')", nil
		}
		return "toDateTime('" + v.UTC().Format(time.DateTime) + "', 'UTC')", nil
	case float32:
		return formatFloat(float64(v)), nil
	case float64:
		return formatFloat(v), nil
	case fmt.Stringer:
		return Quote(v.String()), nil
	}
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return strconv.FormatInt(rv.Int(), 10), nil
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return strconv.FormatUint(rv.Uint(), 10), nil
	case reflect.String:
		return Quote(rv.String()), nil
	case reflect.Slice, reflect.Array:
		parts := make([]string, rv.Len())
		for i := range parts {
			p, err := Literal(rv.Index(i).Interface())
			if err != nil {
				return "", err
			}
			parts[i] = p
		}
		return "[" + strings.Join(parts, ", ") + "]", nil
	case reflect.Pointer:
		if rv.IsNil() {
			return "NULL", nil
		}
		return Literal(rv.Elem().Interface())
	}
	return "", fmt.Errorf("unsupported argument type %T", v)
}

func formatFloat(f float64) string {
	switch {
	case math.IsNaN(f):
		return "nan"
	case math.IsInf(f, 1):
		return "inf"
	case math.IsInf(f, -1):
		return "-inf"
	}
	return strconv.FormatFloat(f, 'g', -1, 64)
}
