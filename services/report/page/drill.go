package page

import (
	"fmt"
	"html/template"
	"net/http"
	"strconv"
	"time"

	"github.com/auditlens/auditlens/lib/printable"
	"github.com/auditlens/auditlens/services/report/console"
	"github.com/auditlens/auditlens/services/report/weekly/render"
)

// pageSize is the rows of a drill-down page.
const pageSize = 50

// maxLinkedID is the longest audit id a link carries; a longer one is linked by its hash.
const maxLinkedID = 256

var keyParams = []string{"rule", "group", "version", "resource"}

// blockerKey reads rule, group, version and resource (a rule and the API it is about).
func blockerKey(f form) (console.BlockerKey, error) {
	var k console.BlockerKey
	var err error
	if k.Rule, err = f.required("rule", maxShort); err != nil {
		return k, err
	}
	if k.Group, err = f.text("group", maxShort); err != nil {
		return k, err
	}
	if k.Version, err = f.text("version", maxShort); err != nil {
		return k, err
	}
	k.Resource, err = f.text("resource", maxShort)
	return k, err
}

func keyQuery(k console.BlockerKey, kv ...string) []string {
	return append([]string{"rule", k.Rule, "group", k.Group, "version", k.Version, "resource", k.Resource}, kv...)
}

// callerQuery names one caller (console.Caller.ID, a hash: never the values themselves,
// which may be longer than a URL carries) behind one blocker: the parameters of /requests.
func callerQuery(k console.BlockerKey, id string) []string {
	return keyQuery(k, "caller", id)
}

// crumbs are the links above a drill-down page: the index and the scope's report, then more.
func (s scope) crumbs(more ...render.Link) []render.Link {
	return append([]render.Link{
		{Label: "All clusters", URL: link("/", "target-version", s.Target.String())},
		{Label: fmt.Sprintf("Report of %s, week ending %s", printable.Truncate(s.Cluster, 60), s.Week), URL: s.link("/report")},
	}, more...)
}

func keyTitle(k console.BlockerKey) string {
	if api := k.API(); api != "" {
		return printable.Truncate(k.Rule+" "+api, 160)
	}
	return printable.Truncate(k.Rule, 160)
}

// callers is GET /callers: who made the requests behind one blocker in the week.
func (h *Handler) callers(w http.ResponseWriter, r *http.Request) error {
	f, err := readForm(r.URL.RawQuery, append(append(scopeParams, keyParams...), "offset")...)
	if err != nil {
		return err
	}
	key, err := blockerKey(f)
	if err != nil {
		return err
	}
	offset, err := f.number("offset", 0, 0, console.MaxOffset)
	if err != nil {
		return err
	}
	s, err := h.scope(r.Context(), f, false)
	if err != nil {
		return err
	}
	rows, more, err := h.reader().Callers(r.Context(), console.CallersQuery{Cluster: s.Cluster, Key: key, Window: s.window(),
		Page: console.Page{Limit: pageSize, Offset: offset}})
	if err != nil {
		return err
	}
	type row struct {
		console.Caller
		Requests template.URL
	}
	body := struct {
		Rows  []row
		Pager pager
	}{}
	for _, c := range rows {
		body.Rows = append(body.Rows, row{Caller: c, Requests: s.link("/requests", callerQuery(key, c.ID)...)})
	}
	body.Pager = newPager(offset, pageSize, len(rows), more, func(o int) template.URL {
		return s.link("/callers", keyQuery(key, "offset", strconv.Itoa(o))...)
	})
	return show(w, "callers", view{Title: "Callers of " + keyTitle(key), Crumbs: s.crumbs(), Note: s.Note, Body: body})
}

// requests is GET /requests: the requests of one caller behind one blocker in the week,
// newest first.
func (h *Handler) requests(w http.ResponseWriter, r *http.Request) error {
	f, err := readForm(r.URL.RawQuery, append(append(scopeParams, keyParams...), "caller", "offset")...)
	if err != nil {
		return err
	}
	key, err := blockerKey(f)
	if err != nil {
		return err
	}
	q := console.RequestsQuery{Key: key}
	id, err := f.required("caller", 20)
	if err != nil {
		return err
	}
	if q.Caller, err = strconv.ParseUint(id, 10, 64); err != nil {
		return bad("caller", "%q: want the caller's number as the callers page links it", id)
	}
	offset, err := f.number("offset", 0, 0, console.MaxOffset)
	if err != nil {
		return err
	}
	s, err := h.scope(r.Context(), f, false)
	if err != nil {
		return err
	}
	q.Cluster, q.Window, q.Page = s.Cluster, s.window(), console.Page{Limit: pageSize, Offset: offset}
	rows, more, err := h.reader().Requests(r.Context(), q)
	if err != nil {
		return err
	}
	type row struct {
		console.Request
		URL template.URL
	}
	body := struct {
		Username, UserAgent, SourceIP string
		Rows                          []row
		Pager                         pager
	}{}
	if len(rows) > 0 {
		body.Username, body.UserAgent, body.SourceIP = rows[0].Username, rows[0].UserAgent, rows[0].SourceIP
	}
	for _, rq := range rows {
		// An audit id is the client's Audit-ID header, of any length: a long one is linked by
		// its hash and time.
		u := s.link("/request", "audit-id", rq.AuditID)
		if len(rq.AuditID) > maxLinkedID {
			u = s.link("/request", "audit-hash", rq.AuditHash, "at", strconv.FormatInt(rq.Time.Unix(), 10))
		}
		body.Rows = append(body.Rows, row{Request: rq, URL: u})
	}
	caller := callerQuery(key, id)
	body.Pager = newPager(offset, pageSize, len(rows), more, func(o int) template.URL {
		return s.link("/requests", append(caller, "offset", strconv.Itoa(o))...)
	})
	crumbs := s.crumbs(render.Link{Label: "Callers of " + keyTitle(key), URL: s.link("/callers", keyQuery(key)...)})
	title := fmt.Sprintf("Requests of %s", printable.Truncate(body.Username, 120))
	return show(w, "requests", view{Title: title, Crumbs: crumbs, Note: s.Note, Body: body})
}

// request is GET /request: one request (audit id) of the cluster with each rule's finding.
func (h *Handler) request(w http.ResponseWriter, r *http.Request) error {
	f, err := readForm(r.URL.RawQuery, append(scopeParams, "audit-id", "audit-hash", "at")...)
	if err != nil {
		return err
	}
	var id string
	var hash uint64
	var at int
	if f.v.Has("audit-hash") {
		if hash, err = strconv.ParseUint(f.v.Get("audit-hash"), 10, 64); err != nil {
			return bad("audit-hash", "%q: want the number the requests page links", f.v.Get("audit-hash"))
		}
		if at, err = f.number("at", 0, 1, 1<<32-1); err != nil || at == 0 {
			return bad("at", "required with audit-hash: the request's time in Unix seconds")
		}
	} else if id, err = f.required("audit-id", maxIdentity); err != nil {
		return err
	}
	s, err := h.scope(r.Context(), f, false)
	if err != nil {
		return err
	}
	var fs []console.Finding
	if id != "" {
		fs, err = h.reader().Request(r.Context(), s.Cluster, id)
	} else if fs, err = h.reader().RequestByHash(r.Context(), s.Cluster, hash, time.Unix(int64(at), 0)); err == nil && len(fs) > 0 {
		id = fs[0].AuditID
	}
	if err != nil {
		return err
	}
	var crumbs []render.Link
	if len(fs) > 0 {
		k := fs[0].Key
		crumbs = append(crumbs, render.Link{Label: "Callers of " + keyTitle(k), URL: s.link("/callers", keyQuery(k)...)},
			render.Link{Label: "Requests of " + printable.Truncate(fs[0].Username, 120),
				URL: s.link("/requests", callerQuery(k, fs[0].CallerID)...)})
	}
	body := struct{ Findings []console.Finding }{fs}
	return show(w, "request", view{Title: "Request " + printable.Truncate(id, 120), Crumbs: s.crumbs(crumbs...), Body: body})
}

// search is GET /search: the callers whose user, user agent or namespace contains a text.
func (h *Handler) search(w http.ResponseWriter, r *http.Request) error {
	f, err := readForm(r.URL.RawQuery, append(scopeParams, "by", "q", "offset")...)
	if err != nil {
		return err
	}
	by := console.SearchBy(f.v.Get("by"))
	if by == "" {
		by = console.ByUser
	}
	labels := map[console.SearchBy]string{console.ByUser: "user", console.ByAgent: "user agent", console.ByNamespace: "namespace"}
	if _, ok := labels[by]; !ok {
		return bad("by", "%q: want user, agent or namespace", by)
	}
	text, err := f.text("q", console.MaxSearchText)
	if err != nil {
		return err
	}
	offset, err := f.number("offset", 0, 0, console.MaxOffset)
	if err != nil {
		return err
	}
	s, err := h.scope(r.Context(), f, false)
	if err != nil {
		return err
	}
	type row struct {
		console.Match
		Requests template.URL
	}
	body := struct {
		scope
		By       []render.Option
		Text     string
		Searched bool
		Rows     []row
		Pager    pager
	}{scope: s, Text: text, Searched: text != ""}
	for _, b := range []console.SearchBy{console.ByUser, console.ByAgent, console.ByNamespace} {
		body.By = append(body.By, render.Option{Value: string(b), Label: labels[b], Selected: b == by})
	}
	if text != "" {
		rows, more, err := h.reader().Search(r.Context(), console.SearchQuery{Cluster: s.Cluster, By: by, Text: text, Window: s.window(),
			Page: console.Page{Limit: pageSize, Offset: offset}})
		if err != nil {
			return err
		}
		for _, m := range rows {
			body.Rows = append(body.Rows, row{Match: m, Requests: s.link("/requests", callerQuery(m.Key, m.ID)...)})
		}
		body.Pager = newPager(offset, pageSize, len(rows), more, func(o int) template.URL {
			return s.link("/search", "by", string(by), "q", text, "offset", strconv.Itoa(o))
		})
	}
	title := "Search in " + printable.Truncate(s.Cluster, 120)
	return show(w, "search", view{Title: title, Crumbs: s.crumbs(), Note: s.Note, Body: body})
}
