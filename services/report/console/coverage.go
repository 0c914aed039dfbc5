package console

import (
	"context"
	"database/sql"
	"slices"
	"strings"
)

// coverageTable is the table of the kinds of events classify saw (its heartbeats) beside the
// findings table t.
func coverageTable(t string) string {
	return t[:strings.LastIndexByte(t, '.')+1] + "coverage_sightings"
}

// What a window's request-body rules could see (Coverage.Bodies).
const (
	// BodiesSeen: a write those rules read arrived with its body (Request level).
	BodiesSeen = "seen"
	// BodiesMetadataOnly: such writes arrived, none with its body: the rules checked nothing.
	BodiesMetadataOnly = "metadata-only"
	// BodiesNoWrites: no such write arrived (nothing was created or changed that they read).
	BodiesNoWrites = "no-writes"
)

// Coverage is what a cluster's verdicts in a window rest on: the ingest inputs that
// delivered its events, their audit levels, and whether the rules that read request bodies
// saw any. Known is false when no heartbeat said (an older classify, or no event at all).
type Coverage struct {
	Known  bool     `json:"known"`
	Inputs []string `json:"inputs"`
	Levels []string `json:"levels"`
	// Bodies: seen, metadata-only (the request-body rules checked nothing) or no-writes.
	Bodies string `json:"request_bodies"`
}

// maxCoverageRows bounds the kinds Coverage reads (a few inputs, three levels, three kinds of
// write).
const maxCoverageRows = 1000

// Coverage reads what cluster's events in w were (classify's coverage sightings).
func (r Reader) Coverage(ctx context.Context, cluster string, w Window) (Coverage, error) {
	t, _, err := r.check(cluster, w, Page{})
	if err != nil {
		return Coverage{}, err
	}
	c := Coverage{Inputs: []string{}, Levels: []string{}, Bodies: BodiesNoWrites}
	err = each(ctx, r.DB, "coverage", `SELECT toString(input) AS i, toString(level) AS l, toString(writes) AS wr
FROM `+coverageTable(t)+`
WHERE cluster = ? AND seen >= toDateTime(?) AND seen < toDateTime(?)
GROUP BY i, l, wr
ORDER BY i, l, wr
LIMIT ?`, []any{cluster, w.From.Unix(), w.To.Unix(), maxCoverageRows}, func(rows *sql.Rows) error {
		var input, level, writes string
		if err := rows.Scan(&input, &level, &writes); err != nil {
			return err
		}
		c.Known = true
		if !slices.Contains(c.Inputs, input) {
			c.Inputs = append(c.Inputs, input)
		}
		if level != "" && !slices.Contains(c.Levels, level) {
			c.Levels = append(c.Levels, level)
		}
		switch {
		case writes == "body":
			c.Bodies = BodiesSeen
		case writes == "no-body" && c.Bodies == BodiesNoWrites:
			c.Bodies = BodiesMetadataOnly
		}
		return nil
	})
	if err != nil {
		return Coverage{}, err
	}
	slices.Sort(c.Levels)
	return c, nil
}

// Unchecked says what the window's verdict could not check, "" when nothing: the rules that
// read request bodies when only Metadata-level writes arrived.
func (c Coverage) Unchecked() string {
	if c.Known && c.Bodies == BodiesMetadataOnly {
		return "the rules that read request bodies (gitRepo volumes, externalIPs, seccomp and AppArmor annotations, node labels, CSR keys, ...): " +
			"the writes they read arrived at Metadata level only (deploy/audit-policy.yaml logs them at Request level)"
	}
	return ""
}

// String says in one line what the events were: "events by file and webhook, at Metadata and
// Request level; request bodies seen".
func (c Coverage) String() string {
	if !c.Known {
		return "no heartbeat says what the events were"
	}
	s := "events by " + strings.Join(c.Inputs, ", ") + ", at " + strings.Join(c.Levels, ", ") + " level"
	switch c.Bodies {
	case BodiesSeen:
		s += "; request bodies seen"
	case BodiesMetadataOnly:
		s += "; writes logged without their bodies"
	default:
		s += "; no write a request-body rule reads"
	}
	return s
}
