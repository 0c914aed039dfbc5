package grafana

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"

	"github.com/auditlens/auditlens/services/report/rollup"
)

// The dashboards read the exact day rows of the view finding_days_current (rollup.View), but
// not through it: ClickHouse 18.16 applies a query's WHERE only after a view's whole SELECT, so a
// week of one cluster would read every day of every cluster. Each panel holds instead the view's
// SELECT with its cluster and days inside (rollup.CurrentSQL), between two comments that name
// them:
//
//	FROM (/* finding_days_current cluster='${cluster}' days=$__dateFilter(day) */
//	  ...rollup.CurrentSQL("", "'${cluster}'", "$__dateFilter(day)")...
//	/* end of finding_days_current */)
//
// (cluster=* for every cluster). InlineDayRows writes that SELECT between the comments.
var dayRows = regexp.MustCompile(`(?s)/\* finding_days_current cluster=(\S+) days=(.*?) \*/(?:.*?)/\* end of finding_days_current \*/`)

// InlineDayRows rewrites every day-rows block of a dashboard JSON model with
// rollup.CurrentSQL for the cluster and days its opening comment names, and says how many
// blocks it found. Run on a current dashboard it changes nothing.
func InlineDayRows(dashboard []byte) ([]byte, int, error) {
	n := 0
	var err error
	out := dayRows.ReplaceAllFunc(dashboard, func(m []byte) []byte {
		n++
		sub := dayRows.FindSubmatch(m)
		var cluster, days string
		if e := unquote(sub[1], &cluster); e != nil {
			err = e
			return m
		}
		if e := unquote(sub[2], &days); e != nil {
			err = e
			return m
		}
		if cluster == "*" {
			cluster = ""
		}
		body, e := quote(rollup.CurrentSQL("", cluster, days) + "\n") // it starts with a newline
		if e != nil {
			err = e
			return m
		}
		return []byte(fmt.Sprintf("/* finding_days_current cluster=%s days=%s */%s/* end of finding_days_current */", sub[1], sub[2], body))
	})
	return out, n, err
}

// unquote reads the inside of a JSON string.
func unquote(inside []byte, s *string) error {
	return json.Unmarshal(append(append([]byte{'"'}, inside...), '"'), s)
}

// quote writes s as the inside of a JSON string, with <, > and & as they are (as the
// dashboard files are written).
func quote(s string) (string, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(s); err != nil {
		return "", err
	}
	q := bytes.TrimSpace(b.Bytes())
	return string(q[1 : len(q)-1]), nil
}
