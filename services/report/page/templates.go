package page

import (
	"bytes"
	"embed"
	"fmt"
	"html/template"
	"net/http"
	"time"

	"github.com/auditlens/auditlens/lib/printable"
	"github.com/auditlens/auditlens/services/report/console"
	"github.com/auditlens/auditlens/services/report/weekly/render"
)

//go:embed templates/*.html.tmpl
var templateFS embed.FS

// maxShown is how many bytes of a value a table cell shows; maxTitle how many its title
// (the tooltip) holds.
const (
	maxShown = 200
	maxTitle = 4096
)

var funcs = template.FuncMap{
	"ts": func(t time.Time) string {
		if t.IsZero() || t.Unix() == 0 {
			return "-"
		}
		return t.UTC().Format("2006-01-02 15:04:05Z")
	},
	// Values from audit events are shown with their control characters escaped (\x1b),
	// then escaped for HTML by html/template.
	"cut": func(s string) string { return printable.Truncate(s, maxShown) },
	// A cell's title holds the value (up to maxTitle bytes), so that a page stays bounded.
	"title": func(s string) string { return printable.Truncate(s, maxTitle) },
	"api":   func(k console.BlockerKey) string { return k.API() },
	// Advice (a rule's message) is shown whole: it comes from the catalogue, not the event,
	// and is bounded to maxTitle all the same.
	"full": func(s string) string { return printable.Truncate(s, maxTitle) },
}

// pages are the console's templates, each with the layout.
var pages = func() map[string]*template.Template {
	base := template.Must(template.New("layout").Funcs(funcs).ParseFS(templateFS, "templates/layout.html.tmpl"))
	m := map[string]*template.Template{}
	for _, name := range []string{"index", "callers", "requests", "request", "search"} {
		m[name] = template.Must(template.Must(base.Clone()).ParseFS(templateFS, "templates/"+name+".html.tmpl"))
	}
	return m
}()

// view is what the layout shows around a page's body.
type view struct {
	Title  string
	Crumbs []render.Link
	Note   string
	Body   any
}

// pager links to the pages of a list before and after rows [From, To] (1-based).
type pager struct {
	From, To   int
	Prev, Next template.URL
}

func newPager(offset, limit, rows int, more bool, at func(offset int) template.URL) pager {
	p := pager{From: offset + 1, To: offset + rows}
	if offset > 0 {
		p.Prev = at(max(0, offset-limit))
	}
	if more && offset+limit <= console.MaxOffset {
		p.Next = at(offset + limit)
	}
	return p
}

// show renders page name with v as an HTML page.
func show(w http.ResponseWriter, name string, v view) error {
	var buf bytes.Buffer
	if err := pages[name].ExecuteTemplate(&buf, "layout", v); err != nil {
		return fmt.Errorf("render %s page: %w", name, err)
	}
	write(w, "text/html; charset=utf-8", &buf)
	return nil
}
