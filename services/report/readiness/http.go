package readiness

import (
	"encoding/json"
	"errors"
	"net/http"

	"github.com/auditlens/auditlens/services/report/access"
	"github.com/auditlens/auditlens/services/report/weekly"
)

// APIPath is where Handler is served: GET APIPath?cluster=X&target_version=1.34.
const APIPath = "/api/v1/readiness"

// Handler serves the gate as JSON: 200 with the Result whatever the state (the state is in
// the body), 400 naming a bad parameter, 403 for a cluster the user may not read
// (access.Allowed, as the console), 503 when maxRequests judgements run already, 500 when
// the store fails.
func (g *Gate) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			writeError(w, http.StatusMethodNotAllowed, "method "+r.Method+" not allowed")
			return
		}
		q := r.URL.Query()
		cluster := q.Get("cluster")
		if cluster == "" || len(cluster) > 253 {
			writeError(w, http.StatusBadRequest, "parameter cluster: want a cluster name")
			return
		}
		var target weekly.Version
		if len(g.targets) > 0 {
			target = g.targets[0]
		}
		if s := q.Get("target_version"); s != "" {
			v, err := weekly.ParseVersion(s)
			if err != nil {
				writeError(w, http.StatusBadRequest, "parameter target_version: want X.Y, e.g. 1.34")
				return
			}
			target = v
		}
		ok, err := access.Allowed(r.Context(), cluster)
		if err != nil {
			writeError(w, http.StatusBadGateway, "review access: "+err.Error())
			return
		}
		if !ok {
			writeError(w, http.StatusForbidden, "you may not read cluster "+cluster+" (RBAC: get on auditlens.io console, name "+cluster+")")
			return
		}
		select {
		case g.busy <- struct{}{}:
			defer func() { <-g.busy }()
		default:
			w.Header().Set("Retry-After", "5")
			writeError(w, http.StatusServiceUnavailable, "too many readiness requests at once; retry")
			return
		}
		if target.IsZero() {
			// The cluster's own default: the release after its own.
			ts, err := g.targetsOf(r.Context(), cluster)
			if err != nil {
				g.log.Warn("readiness request failed", "cluster", cluster, "err", err)
				writeError(w, http.StatusInternalServerError, "the store failed; see the report's log")
				return
			}
			if len(ts) == 0 {
				writeError(w, http.StatusBadRequest, "parameter target_version is required: the release of cluster "+cluster+" is unknown")
				return
			}
			target = ts[0]
		}
		res, err := g.Evaluate(r.Context(), cluster, target)
		if errors.Is(err, weekly.ErrInvalid) {
			writeError(w, http.StatusBadRequest, err.Error())
			return
		}
		if err != nil {
			g.log.Warn("readiness request failed", "cluster", cluster, "target_version", target.String(), "err", err)
			writeError(w, http.StatusInternalServerError, "the store failed; see the report's log")
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		_ = json.NewEncoder(w).Encode(res)
	})
}

func writeError(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(map[string]string{"error": msg})
}
