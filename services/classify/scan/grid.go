package scan

import (
	"fmt"
	"io"
	"os"
	"strings"
	"unicode/utf8"
)

// Column is one column of a Grid: its header and the narrowest it is wrapped to.
type Column struct {
	Name string
	Min  int
}

// Grid prints rows as columns fitted to a width: when the natural width (the widest value of
// each column) is too wide, the widest columns are narrowed, down to their Min, and their
// values wrapped onto more lines of the row; nothing is cut. The tables of classify manifests
// and classify catalogue are grids. Values are shown as given: escape them first
// (lib/printable).
type Grid struct {
	Columns []Column
	rows    []gridRow
}

type gridRow struct {
	values []string
	note   string
}

// Add appends a row (one value per column).
func (g *Grid) Add(values ...string) { g.rows = append(g.rows, gridRow{values: values}) }

// AddNoted appends a row followed by note, wrapped to the table's width and indented: text too
// long for a column (a finding's message).
func (g *Grid) AddNoted(note string, values ...string) {
	g.rows = append(g.rows, gridRow{values: values, note: note})
}

// Write prints the header and the rows fitted to width cells.
func (g *Grid) Write(w io.Writer, width int) error {
	widths := make([]int, len(g.Columns))
	words := make([]int, len(g.Columns)) // the longest word of each column: narrower breaks words
	for i, c := range g.Columns {
		widths[i] = cells(c.Name)
		words[i] = max(c.Min, widths[i])
	}
	for _, r := range g.rows {
		for i, v := range r.values {
			widths[i] = max(widths[i], cells(v))
			for _, word := range strings.Fields(v) {
				words[i] = max(words[i], cells(word))
			}
		}
	}
	total := func() int {
		n := gap * (len(widths) - 1)
		for _, x := range widths {
			n += x
		}
		return n
	}
	// Narrow the widest column by one cell until the row fits: first down to the longest
	// word of each column (values wrap between words), then down to the columns' Min.
	for _, floor := range [][]int{words, nil} {
		for total() > width {
			widest := -1
			for i, x := range widths {
				least := g.Columns[i].Min
				if floor != nil {
					least = floor[i]
				}
				if x > least && (widest < 0 || x > widths[widest]) {
					widest = i
				}
			}
			if widest < 0 {
				break // every column at its narrowest: the rows overflow
			}
			widths[widest]--
		}
	}
	header := make([]string, len(g.Columns))
	for i, c := range g.Columns {
		header[i] = c.Name
	}
	if err := g.print(w, widths, header); err != nil {
		return err
	}
	for _, r := range g.rows {
		if err := g.print(w, widths, r.values); err != nil {
			return err
		}
		if r.note == "" {
			continue
		}
		for _, line := range wrap(r.note, max(width-noteIndent, minWidth/2), 0) {
			if _, err := fmt.Fprintf(w, "%s%s\n", strings.Repeat(" ", noteIndent), line); err != nil {
				return err
			}
		}
	}
	return nil
}

// noteIndent is how far a row's note is indented under it.
const noteIndent = 4

func (g *Grid) print(w io.Writer, widths []int, r []string) error {
	cellLines := make([][]string, len(widths))
	height := 1
	for i := range widths {
		v := ""
		if i < len(r) {
			v = r[i]
		}
		cellLines[i] = wrapCell(v, widths[i])
		height = max(height, len(cellLines[i]))
	}
	var b strings.Builder
	for l := range height {
		line := ""
		for i, lines := range cellLines {
			v := ""
			if l < len(lines) {
				v = lines[l]
			}
			if i > 0 {
				line += strings.Repeat(" ", gap)
			}
			line += pad(v, widths[i])
		}
		b.WriteString(strings.TrimRight(line, " "))
		b.WriteByte('\n')
	}
	_, err := fmt.Fprint(w, b.String())
	return err
}

// OutputWidth is the width a table on w is fitted to: the terminal's when w is one, else
// $COLUMNS, else 120 (at least 40).
func OutputWidth(w io.Writer) int { return outputWidth(w, os.Getenv) }

// wrapCell breaks a value into lines of at most w cells: between words, and a word longer
// than a line after a "/", ".", "-", "#" or ":" where one is far enough in, else where the
// line ends.
func wrapCell(s string, w int) []string {
	if w <= 0 || cells(s) <= w {
		return []string{s}
	}
	var lines []string
	line := ""
	for _, word := range strings.Fields(s) {
		switch {
		case line == "":
		case cells(line)+1+cells(word) <= w:
			line += " "
		default:
			lines = append(lines, line)
			line = ""
		}
		for cells(line)+cells(word) > w {
			room := w - cells(line)
			part := prefix(word, room)
			if i := strings.LastIndexAny(part, "/.-#:"); i >= 0 && i+1 >= room/3 {
				part = part[:i+1]
			}
			if part == "" {
				if line != "" {
					lines = append(lines, line)
					line = ""
					continue
				}
				_, size := utf8.DecodeRuneInString(word) // a wide rune in one cell: it overflows
				part = word[:size]
			}
			lines = append(lines, line+part)
			line, word = "", word[len(part):]
		}
		line += word
	}
	return append(lines, line)
}
