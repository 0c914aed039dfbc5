// Package jsonstr reads JSON string literals fast: where one ends, and its unescaped bytes
// with encoding/json's rules (invalid surrogates become U+FFFD), keeping bytes that are not
// valid UTF-8 as they are.
package jsonstr

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"
)

// Errors of a string literal that is not valid JSON; Error wraps one of them.
var (
	ErrUnterminated = errors.New("unterminated string")
	ErrEscape       = errors.New("invalid escape")
)

// Error is a bad string literal: what is wrong and at which offset of the input.
type Error struct {
	Offset int
	Err    error
	What   string
}

func (e *Error) Error() string { return e.What }
func (e *Error) Unwrap() error { return e.Err }

// End returns the index of the first '"' or '\\' in b, or len(b): eight bytes at a time over
// the first 64 (most strings end there), then with IndexByte, faster on long strings.
func End(b []byte) int {
	n := min(len(b), 64)
	if i := QuoteOrEscape(b[:n]); i < n || n == len(b) {
		return i
	}
	q := bytes.IndexByte(b[n:], '"')
	if q < 0 {
		q = len(b) - n
	}
	if e := bytes.IndexByte(b[n:n+q], '\\'); e >= 0 {
		return n + e
	}
	return n + q
}

// QuoteOrEscape returns the index of the first '"' or '\\' in b, or len(b). It looks at eight
// bytes at a time (the classic has-zero-byte trick on the XOR with each wanted byte): strings
// in audit events are mostly 8 to 40 bytes, where this beats both a byte loop and IndexByte.
func QuoteOrEscape(b []byte) int {
	const lo, hi = 0x0101010101010101, 0x8080808080808080
	i := 0
	for ; i+8 <= len(b); i += 8 {
		x := binary.LittleEndian.Uint64(b[i:])
		q, e := x^(lo*'"'), x^(lo*'\\')
		// The lowest set bit is exact; higher ones may be borrow artefacts, never lower ones.
		if m := ((q-lo)&^q | (e-lo)&^e) & hi; m != 0 {
			return i + bits.TrailingZeros64(m)/8
		}
	}
	for ; i < len(b); i++ {
		if c := b[i]; c == '"' || c == '\\' {
			return i
		}
	}
	return i
}

// shortRun is how many bytes of a run between escapes AppendUnquoted looks at one by one
// before it calls End.
const shortRun = 16

// AppendUnquoted appends to dst the unescaped contents of the string literal whose opening
// quote is just before b, and returns it with the bytes of b read, the closing quote
// included. On an error n is the offset in b of what is wrong.
func AppendUnquoted(dst, b []byte) (out []byte, n int, err error) {
	i := 0
	for i < len(b) {
		switch b[i] {
		case '"':
			return dst, i + 1, nil
		case '\\':
		default:
			// The run up to the next quote or escape: byte by byte over its first bytes
			// (runs between escapes are mostly short), the rest at once up to what End finds.
			end := min(len(b), i+shortRun)
			for i < end && b[i] != '"' && b[i] != '\\' {
				dst = append(dst, b[i])
				i++
			}
			if i == end && i < len(b) && b[i] != '"' && b[i] != '\\' {
				j := i + End(b[i:])
				dst = append(dst, b[i:j]...)
				i = j
			}
			continue
		}
		if i+1 >= len(b) {
			return dst, i, &Error{Offset: i, Err: ErrUnterminated, What: "unterminated escape"}
		}
		switch e := b[i+1]; e {
		case '"', '\\', '/':
			dst = append(dst, e)
		case 'b':
			dst = append(dst, '\b')
		case 'f':
			dst = append(dst, '\f')
		case 'n':
			dst = append(dst, '\n')
		case 'r':
			dst = append(dst, '\r')
		case 't':
			dst = append(dst, '\t')
		case 'u':
			r := U4(b[i:])
			if r < 0 {
				return dst, i, &Error{Offset: i, Err: ErrEscape, What: `invalid \u escape`}
			}
			i += 6
			if utf16.IsSurrogate(r) {
				r1 := U4(b[i:])
				if dec := utf16.DecodeRune(r, r1); dec != unicode.ReplacementChar {
					i += 6
					dst = utf8.AppendRune(dst, dec)
					continue
				}
				r = unicode.ReplacementChar
			}
			dst = utf8.AppendRune(dst, r)
			continue
		default:
			return dst, i, &Error{Offset: i, Err: ErrEscape, What: fmt.Sprintf(`invalid escape \%c`, e)}
		}
		i += 2
	}
	return dst, len(b), &Error{Offset: len(b), Err: ErrUnterminated, What: "unterminated string"}
}

// Unquote returns the contents of the string literal lit, quotes included.
func Unquote(lit []byte) (string, error) {
	if len(lit) < 2 || lit[0] != '"' {
		return "", fmt.Errorf("json: want a string, got %.40q", lit)
	}
	body := lit[1:]
	if i := End(body); i == len(body)-1 && body[i] == '"' {
		return string(body[:i]), nil // no escape: one copy
	}
	out, n, err := AppendUnquoted(make([]byte, 0, len(body)), body)
	if err != nil {
		return "", fmt.Errorf("json: %w at offset %d", err, n+1)
	}
	if n != len(body) {
		return "", fmt.Errorf("json: %d bytes after the string", len(body)-n)
	}
	return string(out), nil
}

// U4 decodes \uXXXX at the start of b, or returns -1 (as encoding/json does).
func U4(b []byte) rune {
	if len(b) < 6 || b[0] != '\\' || b[1] != 'u' {
		return -1
	}
	var r rune
	for _, c := range b[2:6] {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c = c - 'a' + 10
		case 'A' <= c && c <= 'F':
			c = c - 'A' + 10
		default:
			return -1
		}
		r = r*16 + rune(c)
	}
	return r
}
