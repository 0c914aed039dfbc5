package page

import (
	"fmt"
	"html/template"
	"net/url"
	"slices"
	"sort"
	"strconv"
)

// paramError is a query parameter the request got wrong: answered 400 with this sentence.
type paramError struct{ name, msg string }

func (e paramError) Error() string { return e.name + ": " + e.msg }

func bad(name, format string, args ...any) error {
	return paramError{name: name, msg: fmt.Sprintf(format, args...)}
}

// Longest values accepted: an identity taken from an audit event (user agent, user, source
// IP, audit id) may be long, since pages link to it; everything else is short.
const (
	maxIdentity = 64 << 10
	maxShort    = 1024
)

// form is a request's query, checked: only the parameters a page knows, each at most once.
type form struct{ v url.Values }

func readForm(raw string, known ...string) (form, error) {
	v, err := url.ParseQuery(raw)
	if err != nil {
		return form{}, bad("query", "not a valid query string: %v", err)
	}
	names := make([]string, 0, len(v))
	for name := range v {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		if !slices.Contains(known, name) {
			return form{}, bad(name, "unknown parameter (this page takes %v)", known)
		}
		if len(v[name]) > 1 {
			return form{}, bad(name, "given %d times, want once", len(v[name]))
		}
	}
	return form{v}, nil
}

// text is the parameter's value ("" when absent), at most max bytes.
func (f form) text(name string, max int) (string, error) {
	s := f.v.Get(name)
	if len(s) > max {
		return "", bad(name, "%d bytes, want at most %d", len(s), max)
	}
	return s, nil
}

// required is text that must be given and not empty.
func (f form) required(name string, max int) (string, error) {
	if !f.v.Has(name) || f.v.Get(name) == "" {
		return "", bad(name, "required")
	}
	return f.text(name, max)
}

// number is the parameter as an integer from lo to hi, def when absent.
func (f form) number(name string, def, lo, hi int) (int, error) {
	if !f.v.Has(name) {
		return def, nil
	}
	n, err := strconv.Atoi(f.v.Get(name))
	if err != nil || n < lo || n > hi {
		return 0, bad(name, "%q: want a whole number from %d to %d", f.v.Get(name), lo, hi)
	}
	return n, nil
}

// link is the URL of path with the query kv (name, value pairs; empty values left out). It
// is a template.URL, trusted by html/template: path is always one of the console's fixed
// paths and the values are query-encoded here.
func link(path string, kv ...string) template.URL {
	v := url.Values{}
	for i := 0; i+1 < len(kv); i += 2 {
		if kv[i+1] != "" {
			v.Set(kv[i], kv[i+1])
		}
	}
	if len(v) == 0 {
		return template.URL(path)
	}
	return template.URL(path + "?" + v.Encode())
}
