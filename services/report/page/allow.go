package page

import (
	"context"
	"errors"
	"fmt"
	"html/template"
	"net/http"

	"github.com/auditlens/auditlens/services/report/access"
	"github.com/auditlens/auditlens/services/report/console"
)

// errForbidden is a cluster the request's user may not read.
var errForbidden = errors.New("forbidden")

func forbidden(cluster string) error {
	return fmt.Errorf("%w: you may not read the console of cluster %q (RBAC: get on auditlens.io console, name %q)", errForbidden, cluster, cluster)
}

// allow fails unless the request's user may read cluster (access.Allowed).
func allow(ctx context.Context, cluster string) error {
	ok, err := access.Allowed(ctx, cluster)
	if err != nil {
		return fmt.Errorf("review access to cluster %q: %w", cluster, err)
	}
	if !ok {
		return forbidden(cluster)
	}
	return nil
}

// allowed keeps the clusters the request's user may read.
func allowed(ctx context.Context, cs []console.ClusterSummary) ([]console.ClusterSummary, error) {
	out := cs[:0:0]
	for _, c := range cs {
		ok, err := access.Allowed(ctx, c.Name)
		if err != nil {
			return nil, fmt.Errorf("review access to cluster %q: %w", c.Name, err)
		}
		if ok {
			out = append(out, c)
		}
	}
	return out, nil
}

// notFoundError is a cluster with no events or findings: 404 with the clusters the user may read.
type notFoundError struct {
	cluster string
	known   []string
}

func (e notFoundError) Error() string {
	return fmt.Sprintf("cluster %q: no findings or events name it", e.cluster)
}

var notFoundPage = template.Must(template.New("404").Parse(`<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>auditlens: unknown cluster</title></head>
<body><h1>Unknown cluster</h1>
<p id="unknown-cluster">No findings or events name the cluster <code>{{.Cluster}}</code>.</p>
{{if .Known}}<p>Known clusters:</p><ul id="known-clusters">{{range .Known}}<li><a href="{{.URL}}">{{.Name}}</a></li>{{end}}</ul>
{{else}}<p>No cluster is known yet.</p>{{end}}
</body></html>
`))

func (e notFoundError) write(w http.ResponseWriter) {
	type known struct {
		Name string
		URL  template.URL
	}
	v := struct {
		Cluster string
		Known   []known
	}{Cluster: e.cluster}
	for _, k := range e.known {
		v.Known = append(v.Known, known{Name: k, URL: link("/report", "cluster", k)})
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Content-Security-Policy", CSP)
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusNotFound)
	_ = notFoundPage.Execute(w, v)
}
