package jsonstr_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/auditlens/auditlens/lib/jsonstr"
)

// Unquote agrees with encoding/json on valid literals (escapes, surrogate pairs, lone
// surrogates as U+FFFD) and refuses what it refuses, naming the fault.
func TestUnquote(t *testing.T) {
	for _, lit := range []string{
		`""`, `"plain"`, `"a\"b\\c\/d"`, `"\b\f\n\r\t"`, `"\u00e9\u4e2d"`, `"\ud83d\ude00"`,
		`"lone \ud83d here"`, `"lone \ude00"`, `"\ud83d\u0041"`, `"` + strings.Repeat(`x\n`, 100) + `"`,
		`"system:serviceaccount:kube-system:\u0022quoted\u0022"`,
	} {
		var want string
		if err := json.Unmarshal([]byte(lit), &want); err != nil {
			t.Fatalf("%s: encoding/json: %v", lit, err)
		}
		got, err := jsonstr.Unquote([]byte(lit))
		if err != nil || got != want {
			t.Errorf("Unquote(%s) = %q, %v; want %q", lit, got, err, want)
		}
	}
	for lit, what := range map[string]error{
		`"abc`: jsonstr.ErrUnterminated, `"ab\`: jsonstr.ErrUnterminated, `"\x"`: jsonstr.ErrEscape,
		`"\u12"`: jsonstr.ErrEscape, `"\u12g4"`: jsonstr.ErrEscape,
	} {
		if _, err := jsonstr.Unquote([]byte(lit)); !errors.Is(err, what) {
			t.Errorf("Unquote(%s): %v, want %v", lit, err, what)
		}
	}
	if _, err := jsonstr.Unquote([]byte(`"a"b"`)); err == nil {
		t.Error(`Unquote("a"b"): no error for bytes after the string`)
	}
	// Bytes that are not UTF-8 are kept as they are (ClickHouse strings are bytes).
	if got, err := jsonstr.Unquote([]byte("\"\xff\\n\xfe\"")); err != nil || got != "\xff\n\xfe" {
		t.Errorf("raw bytes: %q, %v", got, err)
	}
}

// FuzzUnquote: on valid UTF-8 literals encoding/json accepts, Unquote gives the same string.
func FuzzUnquote(f *testing.F) {
	for _, s := range []string{`"a"`, `"\u00e9"`, `"\ud83d\ude00"`, `"\ud83d"`, `"x\\y"`, `"\"`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, lit []byte) {
		got, err := jsonstr.Unquote(lit)
		var want string
		jerr := json.Unmarshal(lit, &want)
		if !utf8.Valid(lit) || len(lit) < 2 || lit[0] != '"' || lit[len(lit)-1] != '"' {
			return // not one literal alone (encoding/json allows spaces around it)
		}
		if jerr == nil && (err != nil || got != want) {
			if strings.ContainsFunc(string(lit), func(r rune) bool { return r < 0x20 }) {
				return // control characters: encoding/json refuses them, Unquote lets them through
			}
			t.Fatalf("Unquote(%q) = %q, %v; encoding/json %q", lit, got, err, want)
		}
	})
}
