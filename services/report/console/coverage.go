package console

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/auditlens/auditlens/lib/kubeversion"
	"github.com/auditlens/auditlens/services/report/rollup"
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
	// ReviewedThrough is the newest release whose removals the rule catalogue that judged the
	// window knows (the oldest such catalogue when classify replicas differ; zero: no
	// heartbeat said): a verdict for a later target cannot have checked what it changes.
	ReviewedThrough kubeversion.Version `json:"reviewed_through,omitzero"`
	// Expired, when the cluster sent events and all of them lie before the retention, says so
	// (Reader.Expired): the verdict rests on nothing kept.
	Expired Expired `json:"expired,omitzero"`
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
LIMIT ?`, []any{cluster, w.From.Unix(), w.To.Unix(), maxCoverageRows}, func(rows rollup.Row) error {
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
	err = each(ctx, r.DB, "reviewed through", `SELECT DISTINCT through FROM `+reviewTable(t)+`
WHERE cluster = ? AND seen >= toDateTime(?) AND seen < toDateTime(?)
LIMIT ?`, []any{cluster, w.From.Unix(), w.To.Unix(), maxCoverageRows}, func(rows rollup.Row) error {
		var s string
		if err := rows.Scan(&s); err != nil {
			return err
		}
		if v, err := kubeversion.Parse(s); err == nil && (c.ReviewedThrough.IsZero() || v.Less(c.ReviewedThrough)) {
			c.ReviewedThrough = v
		}
		return nil
	})
	if err != nil {
		return Coverage{}, err
	}
	if c.Expired, err = r.Expired(ctx, cluster); err != nil {
		return Coverage{}, err
	}
	return c, nil
}

// reviewTable is the table of the catalogue releases classify's heartbeats named, beside t.
func reviewTable(t string) string {
	return t[:strings.LastIndexByte(t, '.')+1] + "review_sightings"
}

// UncheckedFor is Unchecked, and for a target past ReviewedThrough what the catalogue cannot
// know: the removals of the releases after it.
func (c Coverage) UncheckedFor(target kubeversion.Version) string {
	u := c.Unchecked()
	if c.ReviewedThrough.IsZero() || target.IsZero() || !c.ReviewedThrough.Less(target) {
		return u
	}
	past := fmt.Sprintf("what %s removes and changes: the rule catalogue is reviewed through %s (a newer auditlens knows later releases)",
		target, c.ReviewedThrough)
	if c.ReviewedThrough.Next().Less(target) {
		past = fmt.Sprintf("what %s to %s remove and change: the rule catalogue is reviewed through %s (a newer auditlens knows later releases)",
			c.ReviewedThrough.Next(), target, c.ReviewedThrough)
	}
	if u == "" {
		return past
	}
	return u + "; " + past
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
	reviewed := ""
	if !c.ReviewedThrough.IsZero() {
		reviewed = "; rules reviewed through " + c.ReviewedThrough.String()
	}
	e := c.Expired.String()
	if !c.Known && e != "" {
		return "no event kept: " + e + reviewed
	}
	if e != "" {
		reviewed += "; " + e
	}
	if !c.Known {
		return "no heartbeat says what the events were" + reviewed
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
	return s + reviewed
}
