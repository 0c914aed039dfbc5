package scan

import (
	"io"
	"os"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/width"
)

// defaultWidth is the table width when stdout is no terminal and COLUMNS is unset; a
// narrower width than minWidth is taken as minWidth.
const (
	defaultWidth = 120
	minWidth     = 40
)

// outputWidth is the width the table and its summary are fitted to: the terminal's when w is
// one, else $COLUMNS, else 120 (at least 40).
func outputWidth(w io.Writer, getenv func(string) string) int {
	if f, ok := w.(*os.File); ok {
		if n := terminalWidth(f); n > 0 {
			return max(n, minWidth)
		}
	}
	if n, err := strconv.Atoi(strings.TrimSpace(getenv("COLUMNS"))); err == nil && n > 0 {
		return max(n, minWidth)
	}
	return defaultWidth
}

// cells is the number of terminal columns s takes: East Asian wide and full-width runes two,
// combining marks none, every other rune one. Text shown is escaped first (lib/printable), so
// it holds no control characters.
func cells(s string) int {
	n := 0
	for _, r := range s {
		n += runeCells(r)
	}
	return n
}

func runeCells(r rune) int {
	if r < 0x300 {
		return 1
	}
	if unicode.In(r, unicode.Mn, unicode.Me) {
		return 0
	}
	switch width.LookupRune(r).Kind() {
	case width.EastAsianWide, width.EastAsianFullwidth:
		return 2
	}
	return 1
}

const ellipsis = "…"

// cutEnd returns s cut to at most w cells, ending in "…" when it was cut.
func cutEnd(s string, w int) string {
	if cells(s) <= w {
		return s
	}
	if w < 1 {
		return ""
	}
	return prefix(s, w-1) + ellipsis
}

// cutMiddle returns s cut to at most w cells by replacing its middle with "…": the start and
// the end of a user name (system:serviceaccount:NAMESPACE:NAME) or an API
// (GROUP/VERSION RESOURCE) say the most.
func cutMiddle(s string, w int) string {
	if cells(s) <= w {
		return s
	}
	if w < 3 {
		return cutEnd(s, w)
	}
	head := (w - 1) / 2
	return prefix(s, head) + ellipsis + suffix(s, w-1-head)
}

// cutAPI cuts an API ("GROUP/VERSION RESOURCE") in its group, keeping the version and the
// resource while they fit, else in the middle.
func cutAPI(s string, w int) string {
	if cells(s) <= w {
		return s
	}
	if i := strings.LastIndexByte(s, '/'); i > 0 {
		if head := w - 1 - cells(s[i:]); head >= 3 {
			return prefix(s[:i], head) + ellipsis + s[i:]
		}
	}
	return cutMiddle(s, w)
}

// prefix is the longest start of s that takes at most w cells.
func prefix(s string, w int) string {
	n := 0
	for i, r := range s {
		c := runeCells(r)
		if n+c > w {
			return s[:i]
		}
		n += c
	}
	return s
}

// suffix is the longest end of s that takes at most w cells.
func suffix(s string, w int) string {
	n := 0
	for i := len(s); i > 0; {
		r, size := utf8.DecodeLastRuneInString(s[:i])
		c := runeCells(r)
		if n+c > w {
			return s[i:]
		}
		n += c
		i -= size
	}
	return s
}

// pad returns s followed by spaces up to w cells.
func pad(s string, w int) string {
	if n := cells(s); n < w {
		return s + strings.Repeat(" ", w-n)
	}
	return s
}

// wrap breaks s into lines of at most w cells at spaces, continuation lines indented by hang
// spaces; a word longer than a line is broken where the line ends. w <= 0: s as it is.
func wrap(s string, w, hang int) []string {
	if w <= 0 || cells(s) <= w {
		return []string{s}
	}
	hang = min(hang, w/2)
	lead := len(s) - len(strings.TrimLeft(s, " "))
	var lines []string
	line := s[:min(lead, w/2)]
	n := cells(line)
	empty := true // line holds no word yet
	for _, word := range strings.Fields(s) {
		if !empty && n+1+cells(word) > w {
			lines = append(lines, line)
			line, n, empty = strings.Repeat(" ", hang), hang, true
		}
		if !empty {
			line += " "
			n++
		}
		for n+cells(word) > w {
			part := prefix(word, w-n)
			if part == "" { // a wide rune where one cell is left: it overflows by one
				_, size := utf8.DecodeRuneInString(word)
				part = word[:size]
			}
			lines = append(lines, line+part)
			word = word[len(part):]
			line, n = strings.Repeat(" ", hang), hang
		}
		line += word
		n += cells(word)
		empty = false
	}
	return append(lines, line)
}
