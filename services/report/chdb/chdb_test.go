package chdb

import (
	"bytes"
	"context"
	"database/sql/driver"
	"strings"
	"testing"
	"time"

	"github.com/auditlens/auditlens/lib/enginetest"

	"github.com/auditlens/auditlens/lib/jsonstr"
)

func TestBind(t *testing.T) {
	at := time.Date(2026, 11, 23, 10, 0, 0, 0, time.FixedZone("X", 3600))
	for _, c := range []struct {
		q    string
		args []any
		want string
		err  string
	}{
		{q: "SELECT ?", args: []any{"a'b\\c"}, want: `SELECT 'a\'b\\c'`},
		{q: "SELECT ?, ?", args: []any{42, uint64(7)}, want: "SELECT 42, 7"},
		{q: "SELECT '?', ?", args: []any{"x"}, want: "SELECT '?', 'x'"},
		{q: "SELECT `a?` -- ?\n, ?", args: []any{true}, want: "SELECT `a?` -- ?\n, 1"},
		{q: "SELECT /* ? */ ?", args: []any{nil}, want: "SELECT /* ? */ NULL"},
		{q: `SELECT \?, ?`, args: []any{1.5}, want: "SELECT ?, 1.5"},
		{q: "SELECT ?", args: []any{[]string{"a", "'"}}, want: `SELECT ['a', '\'']`},
		{q: "SELECT ?", args: []any{at}, want: "SELECT toDateTime('2026-11-23 09:00:00', 'UTC')"},
		{q: "SELECT ?", args: []any{"nul\x00"}, want: `SELECT 'nul\0'`},
		{q: "SELECT ?", args: []any{"'; DROP TABLE findings; --"}, want: `SELECT '\'; DROP TABLE findings; --'`},
		{q: "SELECT ?, ?", args: []any{1}, err: "more ? than"},
		{q: "SELECT ?", args: []any{1, 2}, err: "2 arguments given for 1"},
		{q: "SELECT ?", args: []any{struct{}{}}, err: "unsupported argument type"},
	} {
		nv := make([]driver.NamedValue, len(c.args))
		for i, a := range c.args {
			nv[i] = driver.NamedValue{Ordinal: i + 1, Value: a}
		}
		got, err := bind(c.q, nv)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("bind(%q): err %v, want %q", c.q, err, c.err)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("bind(%q, %v) = %q, %v; want %q", c.q, c.args, got, err, c.want)
		}
	}
}

func TestConvert(t *testing.T) {
	for _, c := range []struct {
		typ, raw string
		want     any
	}{
		{"String", `"a\"\\\u00e9\n"`, "a\"\\é\n"},
		{"LowCardinality(String)", `"x"`, "x"},
		{"Nullable(String)", `null`, nil},
		{"UInt64", `18446744073709551615`, uint64(18446744073709551615)},
		{"UInt64", `"5"`, uint64(5)},
		{"UInt8", `1`, uint8(1)},
		{"Int32", `-3`, int32(-3)},
		{"Float64", `1.5`, 1.5},
		{"Date", `"2026-11-23"`, time.Date(2026, 11, 23, 0, 0, 0, 0, time.UTC)},
		{"DateTime('UTC')", `"2026-11-23 10:00:00"`, time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)},
		{"DateTime64(3)", `"2026-11-23 10:00:00.250"`, time.Date(2026, 11, 23, 10, 0, 0, 250e6, time.UTC)},
	} {
		got, err := convert(c.typ, []byte(c.raw))
		if err != nil {
			t.Errorf("convert(%s, %s): %v", c.typ, c.raw, err)
			continue
		}
		if gt, ok := got.(time.Time); ok {
			if !gt.Equal(c.want.(time.Time)) {
				t.Errorf("convert(%s, %s) = %v, want %v", c.typ, c.raw, got, c.want)
			}
			continue
		}
		if got != c.want {
			t.Errorf("convert(%s, %s) = %#v, want %#v", c.typ, c.raw, got, c.want)
		}
	}
	arr, err := convert("Array(String)", []byte(`["a", "b,]", "`+"\xff"+`"]`))
	if err != nil {
		t.Fatal(err)
	}
	if a := arr.([]string); len(a) != 3 || a[1] != "b,]" || a[2] != "\xff" {
		t.Errorf("array: %q", a)
	}
}

func FuzzDecodeRow(f *testing.F) {
	f.Add([]byte(`["a", 1, null, ["x", "y"], {"k": "v"}]`))
	f.Add([]byte(`["\u00e9\ud83d\ude00\\", "\xff"]`))
	f.Fuzz(func(t *testing.T, b []byte) {
		vals, err := splitArray(b)
		if err != nil {
			return
		}
		for _, v := range vals {
			if len(v) > 0 && v[0] == '"' {
				_, _ = jsonstr.Unquote(v)
			}
		}
	})
}

// TestSecondDirectoryRefused checks the one-session-per-process guard.
func TestSecondDirectoryRefused(t *testing.T) {
	if err := Available(); err != nil {
		enginetest.Unavailable(t, "chdb", err)
	}
	ctx := context.Background()
	dir := t.TempDir()
	st, err := Open(ctx, dir, "one")
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if _, err := Open(ctx, t.TempDir(), "two"); err == nil || !strings.Contains(err.Error(), "one session per process") {
		t.Errorf("second directory: err %v, want a refusal", err)
	}
	st2, err := Open(ctx, dir, "two")
	if err != nil {
		t.Fatalf("same directory, other database: %v", err)
	}
	defer st2.Close()
	if _, err := st.DB().Exec("CREATE TABLE t (x UInt8) ENGINE = Memory"); err != nil {
		t.Fatal(err)
	}
	var n uint64
	if err := st2.DB().QueryRow("SELECT count() FROM system.tables WHERE database = currentDatabase() AND name = 't'").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Errorf("database two sees the table of database one")
	}
}

func TestWriteTSV(t *testing.T) {
	at := time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		v    any
		typ  string
		want string
	}{
		{"a\tb\nc\\d'e\x00\r", "String", `a\tb\nc\\d'e\0\r`},
		{"\xff", "String", "\xff"},
		{[]string{"x'y", "t\tz"}, "Array(String)", `['x\'y','t\tz']`},
		{at, "DateTime('UTC')", "1795428000"},
		{at, "Date", "2026-11-23"},
		{uint32(7), "UInt32", "7"},
		{int32(-3), "Int32", "-3"},
		{nil, "Nullable(String)", `\N`},
		{[]uint32{1, 2}, "Array(UInt32)", "[1,2]"},
	} {
		var b bytes.Buffer
		if err := writeTSV(&b, c.v, c.typ, false); err != nil {
			t.Errorf("%#v: %v", c.v, err)
			continue
		}
		if b.String() != c.want {
			t.Errorf("writeTSV(%#v, %s) = %q, want %q", c.v, c.typ, b.String(), c.want)
		}
	}
}
