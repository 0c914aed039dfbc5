package auditevent

import (
	"encoding/binary"
	"fmt"
	"math/bits"
	"unsafe"

	"github.com/auditlens/auditlens/lib/jsonstr"
)

// maxDepth is encoding/json's nesting limit: deeper input is rejected by both decoders.
const maxDepth = 10000

// scanner walks JSON text without building a tree. Strings without escapes are returned as
// views into the input; escaped ones are unquoted into arena with encoding/json's rules
// (invalid surrogates become U+FFFD).
type scanner struct {
	b     []byte
	i     int
	arena *[]byte
}

func (s *scanner) errorf(format string, args ...any) error {
	return fmt.Errorf("%w: %s at offset %d", ErrNotJSON, fmt.Sprintf(format, args...), s.i)
}

func (s *scanner) ws() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// peek returns the next non-space byte, or 0 at the end.
func (s *scanner) peek() byte {
	if s.i < len(s.b) {
		if c := s.b[s.i]; c > ' ' {
			return c // compact JSON: no whitespace to skip
		}
	}
	s.ws()
	if s.i >= len(s.b) {
		return 0
	}
	return s.b[s.i]
}

func (s *scanner) expect(c byte) error {
	if s.peek() != c {
		if s.i >= len(s.b) {
			return s.errorf("unexpected end, want %q", c)
		}
		return s.errorf("got %q, want %q", s.b[s.i], c)
	}
	s.i++
	return nil
}

// literal consumes true, false or null.
func (s *scanner) literal(word string) error {
	if len(s.b)-s.i < len(word) || string(s.b[s.i:s.i+len(word)]) != word {
		return s.errorf("invalid literal, want %s", word)
	}
	s.i += len(word)
	return nil
}

// isNull consumes a null literal if one is next.
func (s *scanner) isNull() (bool, error) {
	if s.peek() != 'n' {
		return false, nil
	}
	return true, s.literal("null")
}

// str reads a JSON string. Control characters are let through (encoding/json rejects them;
// the fast decoder is lenient there).
func (s *scanner) str() (string, error) {
	if b, i := s.b, s.i; i < len(b) && b[i] == '"' {
		// The common case in one piece: the quote is next; the end is found without a call
		// when it is near, and the first 64 bytes are not searched again when it is not.
		start := i + 1
		j := shortString(b, start)
		if j == 0 {
			if start+64 <= len(b) {
				j = start + 64 + stringEnd(b[start+64:])
			} else {
				j = start + stringEnd(b[start:])
			}
		}
		if j < len(b) {
			if b[j] == '"' {
				s.i = j + 1
				return b2s(b[start:j]), nil
			}
			s.i = j
			return s.strSlow(start)
		}
	}
	return s.strGeneral()
}

// shortString returns the index of the first quote or backslash in b from start when it
// comes within 64 bytes, else 0: jsonstr.QuoteOrEscape's loop, small enough for the compiler to
// inline into the callers that read most strings (b[k] == '"' there: a string without escapes).
func shortString(b []byte, start int) int {
	const lo, hi = 0x0101010101010101, 0x8080808080808080
	const quotes, escapes = lo * '"', lo * '\\'
	for j := start; j+8 <= len(b) && j < start+64; j += 8 {
		x := binary.LittleEndian.Uint64(b[j:])
		if m := ((x^quotes-lo)&^(x^quotes) | (x^escapes-lo)&^(x^escapes)) & hi; m != 0 {
			return j + bits.TrailingZeros64(m)>>3
		}
	}
	return 0
}

// strGeneral is str for any input: white space first, escapes, errors.
func (s *scanner) strGeneral() (string, error) {
	if err := s.expect('"'); err != nil {
		return "", err
	}
	b, start := s.b, s.i
	i := start + stringEnd(b[start:])
	if i >= len(b) {
		return "", s.errorf("unterminated string")
	}
	if b[i] == '\\' {
		s.i = i
		return s.strSlow(start)
	}
	s.i = i + 1
	return b2s(b[start:i]), nil
}

// stringEnd returns the index of the first '"' or '\\' in b, or len(b) (jsonstr.End).
func stringEnd(b []byte) int { return jsonstr.End(b) }

// strSlow unquotes a string with escapes into the arena: the run from start (just after the
// quote) to s.i (the first escape) as it is, the rest with jsonstr.
func (s *scanner) strSlow(start int) (string, error) {
	a := *s.arena
	off := len(a)
	a = append(a, s.b[start:s.i]...)
	a, n, err := jsonstr.AppendUnquoted(a, s.b[s.i:])
	s.i += n
	if err != nil {
		return "", s.errorf("%s", err.Error())
	}
	*s.arena = a
	return b2s(a[off:len(a):len(a)]), nil
}

// skipString passes over a string, checking escapes.
func (s *scanner) skipString() error {
	if j := shortString(s.b, s.i+1); j > 0 && s.b[j] == '"' {
		s.i = j + 1
		return nil
	}
	s.i++ // opening quote, checked by the caller
	b := s.b
	for {
		i := s.i + stringEnd(b[s.i:])
		if i >= len(b) {
			return s.errorf("unterminated string")
		}
		if b[i] == '"' {
			s.i = i + 1
			return nil
		}
		s.i = i
		if s.i+1 >= len(b) {
			return s.errorf("unterminated escape")
		}
		switch b[s.i+1] {
		case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			s.i += 2
		case 'u':
			if jsonstr.U4(b[s.i:]) < 0 {
				return s.errorf("invalid \\u escape")
			}
			s.i += 6
		default:
			return s.errorf("invalid escape")
		}
	}
}

// number passes over a number with JSON's grammar and returns its text.
func (s *scanner) number() ([]byte, error) {
	start := s.i
	b := s.b
	if s.i < len(b) && b[s.i] == '-' {
		s.i++
	}
	switch {
	case s.i < len(b) && b[s.i] == '0':
		s.i++
	case s.i < len(b) && b[s.i] >= '1' && b[s.i] <= '9':
		for s.i < len(b) && b[s.i] >= '0' && b[s.i] <= '9' {
			s.i++
		}
	default:
		return nil, s.errorf("invalid number")
	}
	if s.i < len(b) && b[s.i] == '.' {
		s.i++
		d := s.i
		for s.i < len(b) && b[s.i] >= '0' && b[s.i] <= '9' {
			s.i++
		}
		if s.i == d {
			return nil, s.errorf("invalid number")
		}
	}
	if s.i < len(b) && (b[s.i] == 'e' || b[s.i] == 'E') {
		s.i++
		if s.i < len(b) && (b[s.i] == '+' || b[s.i] == '-') {
			s.i++
		}
		d := s.i
		for s.i < len(b) && b[s.i] >= '0' && b[s.i] <= '9' {
			s.i++
		}
		if s.i == d {
			return nil, s.errorf("invalid number")
		}
	}
	return b[start:s.i], nil
}

// skip passes over one value of any type and returns its exact text.
func (s *scanner) skip(depth int) ([]byte, error) {
	c := s.peek()
	start := s.i
	var err error
	switch {
	case c == '"':
		err = s.skipString()
	case c == '{':
		var more bool
		more, err = s.objBegin(depth + 1)
		for more && err == nil {
			if _, err = s.objKey(); err != nil {
				break
			}
			if _, err = s.skip(depth + 1); err != nil {
				break
			}
			more, err = s.objNext()
		}
	case c == '[':
		var more bool
		more, err = s.arrBegin(depth + 1)
		for more && err == nil {
			if _, err = s.skip(depth + 1); err != nil {
				break
			}
			more, err = s.arrNext()
		}
	case c == 't':
		err = s.literal("true")
	case c == 'f':
		err = s.literal("false")
	case c == 'n':
		err = s.literal("null")
	case c == '-' || (c >= '0' && c <= '9'):
		_, err = s.number()
	case c == 0:
		return nil, s.errorf("unexpected end of input")
	default:
		return nil, s.errorf("invalid character %q", c)
	}
	if err != nil {
		return nil, err
	}
	return s.b[start:s.i], nil
}

// objectStart checks that the input is a JSON object: another JSON value is "not an audit
// event", anything else "not JSON".
func (s *scanner) objectStart() error {
	c := s.peek()
	if c == '{' {
		return nil
	}
	if c == '[' || c == '"' || c == 't' || c == 'f' || c == 'n' || c == '-' || (c >= '0' && c <= '9') {
		if _, err := s.skip(0); err != nil {
			return err
		}
		if s.peek() != 0 {
			return s.errorf("data after the value")
		}
		return fmt.Errorf("%w: a JSON %s", ErrNotAuditEvent, kindName(c))
	}
	return s.errorf("want a JSON object")
}

// objBegin consumes '{' and reports whether a member follows. Walk an object with
//
//	more, err := s.objBegin(depth)
//	for more && err == nil { k, err := s.objKey(); /* consume the value */; more, err = s.objNext() }
func (s *scanner) objBegin(depth int) (bool, error) {
	if depth > maxDepth {
		return false, s.errorf("exceeded max depth")
	}
	if err := s.expect('{'); err != nil {
		return false, err
	}
	if s.peek() == '}' {
		s.i++
		return false, nil
	}
	return true, nil
}

// objKey reads a member's key and the colon after it.
func (s *scanner) objKey() (string, error) {
	if b, i := s.b, s.i; i < len(b) && b[i] == '"' {
		// The common case in one piece: "key": with no escape and no space before the colon.
		if j := shortString(b, i+1); j > 0 && b[j] == '"' && j+1 < len(b) && b[j+1] == ':' {
			s.i = j + 2
			if s.i < len(b) && b[s.i] <= ' ' {
				s.ws()
			}
			return b2s(b[i+1 : j]), nil
		}
	}
	if s.peek() != '"' {
		return "", s.errorf("want an object key")
	}
	k, err := s.str()
	if err != nil {
		return "", err
	}
	if err := s.expect(':'); err != nil {
		return "", err
	}
	s.ws()
	return k, nil
}

// objNext consumes ',' (another member follows) or '}' (the end).
func (s *scanner) objNext() (bool, error) {
	switch s.peek() {
	case ',':
		s.i++
		return true, nil
	case '}':
		s.i++
		return false, nil
	}
	return false, s.errorf("want ',' or '}' in object")
}

// arrBegin consumes '[' and reports whether an element follows; arrNext consumes ',' or ']'.
func (s *scanner) arrBegin(depth int) (bool, error) {
	if depth > maxDepth {
		return false, s.errorf("exceeded max depth")
	}
	if err := s.expect('['); err != nil {
		return false, err
	}
	if s.peek() == ']' {
		s.i++
		return false, nil
	}
	s.ws()
	return true, nil
}

func (s *scanner) arrNext() (bool, error) {
	switch s.peek() {
	case ',':
		s.i++
		s.ws()
		return true, nil
	case ']':
		s.i++
		return false, nil
	}
	return false, s.errorf("want ',' or ']' in array")
}

// kindName names the JSON type starting with c, for error messages.
func kindName(c byte) string {
	switch c {
	case '"':
		return "string"
	case '{':
		return "object"
	case '[':
		return "array"
	case 't', 'f':
		return "boolean"
	case 'n':
		return "null"
	case 0:
		return "nothing"
	}
	return "number"
}

func b2s(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	return unsafe.String(unsafe.SliceData(b), len(b))
}
