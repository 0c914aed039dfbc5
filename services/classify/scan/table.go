package scan

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/auditlens/auditlens/lib/printable"
	auditlensv1 "github.com/auditlens/auditlens/proto/auditlens/v1"
)

// rowWriter prints findings as rows: the table, wide and markdown formats.
type rowWriter interface {
	row(f *auditlensv1.Finding)
	// flush writes what is buffered.
	flush()
}

// column is one column of the findings table.
type column struct {
	name string
	// min is the narrowest the column is cut to.
	min int
	// readable, for the columns that matter most (rule, API, verb, user), is the width they
	// get before any optional column is shown.
	readable int
	// drop, for the optional columns, is the order in which they are left out when the width
	// is short (1 first).
	drop int
	cut  func(string, int) string
}

func (c column) optional() bool { return c.drop > 0 }

var columns = [...]column{
	{name: "TIME", min: 20, drop: 4, cut: cutEnd},
	{name: "SEVERITY", min: 8, drop: 2, cut: cutEnd},
	{name: "RULE", min: 28, readable: 28, cut: cutEnd}, // never cut: an id to copy (the longest is 28)
	{name: "REMOVED", min: 7, drop: 5, cut: cutEnd},
	{name: "API", min: 16, readable: 30, cut: cutAPI},
	{name: "VERB", min: 6, readable: 8, cut: cutEnd},
	{name: "OBJECT", min: 12, drop: 3, cut: cutMiddle},
	{name: "USER", min: 12, readable: 32, cut: cutMiddle},
	{name: "USER AGENT", min: 16, drop: 1, cut: cutEnd},
}

const gap = 2 // spaces between columns

type (
	row       [len(columns)]string
	colWidths [len(columns)]int
)

// values are the cells of f, every one escaped (lib/printable): all but the time and
// severity come from the event or a rules file, and a tab or newline would break the table.
func values(f *auditlensv1.Finding) row {
	ts := ""
	if f.EventTime != nil {
		ts = f.EventTime.AsTime().UTC().Format("2006-01-02T15:04:05Z")
	}
	obj := f.Name
	if f.Namespace != "" {
		obj = f.Namespace + "/" + f.Name
	}
	if f.Subresource != "" {
		obj += " (" + f.Subresource + ")"
	}
	p := printable.String
	return row{ts, SeverityName(f.Severity), p(f.RuleId), dash(p(f.RemovedIn)), dash(p(apiName(f))), p(f.Verb), dash(p(obj)),
		p(f.Username), dash(p(f.UserAgent))}
}

func apiName(f *auditlensv1.Finding) string {
	return strings.TrimSpace(groupVersion(f.ApiGroup, f.ApiVersion) + " " + f.Resource)
}

// fitWidths chooses the columns shown and their widths so that a row takes at most width
// cells, given the natural (widest value) width of each column. Optional columns are left
// out, in their drop order, until the important ones can have their readable width; what is
// left is shared evenly among the columns narrower than their values. A width of 0 leaves a column out.
func fitWidths(natural colWidths, width int) (w colWidths) {
	var shown [len(columns)]bool
	for i := range shown {
		shown[i] = true
	}
	total := func(f func(i int) int) int {
		n := 0
		for i := range columns {
			if shown[i] {
				n += f(i) + gap
			}
		}
		return n - gap
	}
	if total(func(i int) int { return natural[i] }) <= width {
		return natural
	}
	for drop := 1; ; drop++ {
		need := total(func(i int) int {
			if columns[i].optional() {
				return min(natural[i], columns[i].min)
			}
			return min(natural[i], columns[i].readable)
		})
		i := dropIndex(drop)
		if need <= width || i < 0 {
			break
		}
		shown[i] = false
	}
	for i := range columns {
		if shown[i] {
			w[i] = min(natural[i], columns[i].min)
		}
	}
	used := func() int { return total(func(i int) int { return w[i] }) }
	// Below the sum of the minimums (a very narrow terminal): the widest column gives way.
	for used() > width {
		widest := 0
		for i := range w {
			if w[i] > w[widest] {
				widest = i
			}
		}
		if w[widest] <= 1 {
			break
		}
		w[widest]--
	}
	var readable, full colWidths // of the columns shown
	for i, c := range columns {
		if shown[i] {
			readable[i] = max(w[i], min(natural[i], c.readable))
			full[i] = natural[i]
		}
	}
	share(&w, readable, width-used())
	share(&w, full, width-used())
	return w
}

// share adds up to spare cells to the columns of w below their want, one cell at a time to
// each in turn: a column that lacks little is filled, the others share what is left evenly.
func share(w *colWidths, want colWidths, spare int) {
	for spare > 0 {
		given := false
		for i := range w {
			if spare > 0 && w[i] < want[i] {
				w[i]++
				spare--
				given = true
			}
		}
		if !given {
			return
		}
	}
}

// dropIndex is the column dropped n-th, -1 when there is none.
func dropIndex(n int) int {
	for i, c := range columns {
		if c.drop == n {
			return i
		}
	}
	return -1
}

// tableSample is how many rows the table reads before it fixes its column widths; later
// rows are cut to them, so the table holds at most this many rows in memory.
const tableSample = 1000

// fittedTable prints findings as columns fitted to a width (--format table).
type fittedTable struct {
	w      io.Writer
	width  int
	rows   []row
	widths colWidths // fixed after the first tableSample rows
	fixed  bool
	// cut reports whether a value was cut or a column left out: the summary then points to
	// --format wide.
	cut bool
}

func newFittedTable(w io.Writer, width int) *fittedTable {
	return &fittedTable{w: w, width: width}
}

func (t *fittedTable) row(f *auditlensv1.Finding) {
	r := values(f)
	if t.fixed {
		t.print(r)
		return
	}
	t.rows = append(t.rows, r)
	if len(t.rows) >= tableSample {
		t.fix()
	}
}

func (t *fittedTable) fix() {
	var header row
	var natural colWidths
	for i, c := range columns {
		header[i] = c.name
		natural[i] = len(c.name)
	}
	for _, r := range t.rows {
		for i, v := range r {
			natural[i] = max(natural[i], cells(v))
		}
	}
	t.widths = fitWidths(natural, t.width)
	t.fixed = true
	t.cut = t.widths != natural
	t.print(header)
	for _, r := range t.rows {
		t.print(r)
	}
	t.rows = nil
}

func (t *fittedTable) print(r row) {
	var b strings.Builder
	for i, v := range r {
		w := t.widths[i]
		if w == 0 {
			continue
		}
		if cells(v) > w {
			v = columns[i].cut(v, w)
			t.cut = true
		}
		if b.Len() > 0 {
			b.WriteString(strings.Repeat(" ", gap))
		}
		b.WriteString(pad(v, w))
	}
	fmt.Fprintln(t.w, strings.TrimRight(b.String(), " "))
}

func (t *fittedTable) flush() {
	if !t.fixed && len(t.rows) > 0 {
		t.fix()
	}
}

// wideTable prints findings as aligned columns holding every value in full (--format wide).
type wideTable struct {
	tw     *tabwriter.Writer
	header bool
}

func newWideTable(w io.Writer) *wideTable {
	return &wideTable{tw: tabwriter.NewWriter(w, 0, 0, gap, ' ', 0)}
}

func (t *wideTable) row(f *auditlensv1.Finding) {
	if !t.header {
		names := make([]string, len(columns))
		for i, c := range columns {
			names[i] = c.name
		}
		fmt.Fprintln(t.tw, strings.Join(names, "\t"))
		t.header = true
	}
	r := values(f)
	fmt.Fprintln(t.tw, strings.Join(r[:], "\t"))
}

func (t *wideTable) flush() { _ = t.tw.Flush() }

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
