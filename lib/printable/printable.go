// Package printable makes text taken from audit events safe to show on a terminal or in a
// document: control and other non-printable characters (escape sequences, forged newlines,
// bidirectional overrides) are written as Go escapes (\x1b, \n, \u202e) instead.
package printable

import (
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// String returns s with every non-printable rune (unicode.IsPrint false, which includes
// tabs and newlines) replaced by its Go escape, and every invalid UTF-8 byte by \xNN; s
// itself when it has none.
func String(s string) string {
	i := strings.IndexFunc(s, func(r rune) bool { return r == utf8.RuneError || !unicode.IsPrint(r) })
	if i < 0 {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 8)
	b.WriteString(s[:i])
	for s = s[i:]; s != ""; {
		r, n := utf8.DecodeRuneInString(s)
		switch {
		case r == utf8.RuneError && n == 1:
			b.WriteString(`\x`)
			b.WriteString(strconv.FormatUint(uint64(s[0])>>4, 16))
			b.WriteString(strconv.FormatUint(uint64(s[0])&0xf, 16))
		case unicode.IsPrint(r):
			b.WriteString(s[:n])
		default:
			q := strconv.QuoteRuneToASCII(r)
			b.WriteString(q[1 : len(q)-1])
		}
		s = s[n:]
	}
	return b.String()
}

// Truncate returns String(s) cut to at most n bytes, on a rune boundary, ending in "..."
// when it was cut (n below 4: no cut).
func Truncate(s string, n int) string {
	s = String(s)
	if len(s) <= n || n < 4 {
		return s
	}
	cut := n - 3
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "..."
}

// JSON appends to dst the JSON document src (as encoding/json writes it) with the control
// characters encoding/json leaves raw written as \u escapes: DEL (U+007F) and the C1 controls
// (U+0080 to U+009F; U+009B is a CSI to many terminals). The value is the same JSON.
func JSON(dst, src []byte) []byte {
	for i := 0; i < len(src); i++ {
		c := src[i]
		switch {
		case c == 0x7f:
			dst = append(dst, `\u007f`...)
		case c == 0xc2 && i+1 < len(src) && src[i+1] >= 0x80 && src[i+1] <= 0x9f:
			dst = append(dst, `\u00`...)
			dst = append(dst, "0123456789abcdef"[src[i+1]>>4], "0123456789abcdef"[src[i+1]&0xf])
			i++
		default:
			dst = append(dst, c)
		}
	}
	return dst
}
