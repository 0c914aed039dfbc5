package rollup

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"sort"
	"time"
)

// readPlan says where each cluster's day of a span is read from.
type readPlan struct {
	// builds are the ids of the builds read: a day's whole, or its prefix.
	builds []uint64
	// prefixed are the days ("YYYY-MM-DD cluster") read from a prefix and later hours.
	prefixed []string
	// dirty are the days ("YYYY-MM-DD cluster") read from their hours' states, between the
	// days first and last.
	dirty       []string
	first, last time.Time
	// tail are the hours (hourPair) after the prefixes read from their states, between
	// firstHour and lastHour (Unix seconds).
	tail                []string
	firstHour, lastHour uint32
}

// buildRecord is one build of a cluster's day: of its hours before until (Unix seconds),
// begun at built (the server's clock).
type buildRecord struct {
	until, built uint32
	build        uint64
}

// Whole is the condition on a row of the builds table that its build covers its day whole:
// it ends at the next midnight (closes is its Go form).
const Whole = `toDate(until) > day`

// closes reports whether b covers its day whole (it ends at the day's end).
func (b buildRecord) closes(day string) bool {
	start, err := time.Parse(DayFormat, day)
	return err == nil && int64(b.until) >= start.AddDate(0, 0, 1).Unix()
}

// plan reads how each day of cluster ("" for every cluster) in [from, to) that has findings
// is read: from its newest whole build when that build is current (began more than the
// margin after the day last changed); else from the prefix that ends latest among those
// current and begun after the newest whole build, and the states of the later hours; else
// from its hours' states. Builds older than the day's newest whole build are never read, so
// Clean may delete them.
func plan(ctx context.Context, db *sql.DB, t Tables, cluster string, from, to time.Time) (readPlan, error) {
	return remember(ctx, fmt.Sprintf("plan %s %q %d %d", t.Builds, cluster, from.Unix(), to.Unix()), func() (readPlan, error) {
		return readPlanOf(ctx, db, t, cluster, from, to)
	})
}

func readPlanOf(ctx context.Context, db *sql.DB, t Tables, cluster string, from, to time.Time) (readPlan, error) {
	cond, hourArgs := hours(cluster, from, to)
	changed := map[string]uint32{}
	err := each(ctx, db, `SELECT toString(cluster), toString(toDate(hour)) AS d, maxMerge(changed), toUInt32(0), toUInt64(0) FROM `+t.HourChanges+`
WHERE `+cond+` GROUP BY cluster, d`, hourArgs, func(c, d string, ts uint32, _ uint64) { changed[pair(d, c)] = ts })
	if err != nil {
		return readPlan{}, fmt.Errorf("read the days' changes: %w", err)
	}
	where, args := span(cluster, from, to)
	builds := map[string][]buildRecord{}
	err = scan(ctx, db, `SELECT toString(cluster), toString(day), toUInt32(until), built, build FROM `+t.Builds+`
WHERE `+where, args, func(c, d string, until, built uint32, id uint64) {
		builds[pair(d, c)] = append(builds[pair(d, c)], buildRecord{until: until, built: built, build: id})
	})
	if err != nil {
		return readPlan{}, fmt.Errorf("read the days' builds: %w", err)
	}
	var p readPlan
	var open []string
	wholes := map[string]buildRecord{}
	for cd, ch := range changed {
		whole, ok := newestWhole(cd, builds[cd])
		if ok && covers(whole.built, ch) {
			p.builds = append(p.builds, whole.build)
			continue
		}
		wholes[cd] = whole
		open = append(open, cd)
	}
	sort.Strings(open)
	hourChanges, err := readHours(ctx, db, t, cluster, open)
	if err != nil {
		return readPlan{}, err
	}
	for _, cd := range open {
		if pr, tail, ok := currentPrefix(cd, builds[cd], wholes[cd].built, hourChanges[cd]); ok {
			p.builds = append(p.builds, pr.build)
			p.prefixed = append(p.prefixed, cd)
			for _, h := range tail {
				p.tail = append(p.tail, hourPair(h, cd[len(DayFormat)+1:]))
				if p.firstHour == 0 || h < p.firstHour {
					p.firstHour = h
				}
				p.lastHour = max(p.lastHour, h)
			}
			continue
		}
		p.dirty = append(p.dirty, cd)
		d, err := time.Parse(DayFormat, cd[:len(DayFormat)])
		if err != nil {
			return readPlan{}, err
		}
		if p.first.IsZero() || d.Before(p.first) {
			p.first = d
		}
		if d.After(p.last) {
			p.last = d
		}
	}
	sort.Strings(p.tail)
	// In order, so that two reads of the same plan write the same SQL (Reads shares them).
	slices.Sort(p.builds)
	return p, nil
}

// newestWhole is the newest of builds (of the day "YYYY-MM-DD cluster") that covers the day
// whole; of two begun in the same second, the larger id (any would do: both are complete).
func newestWhole(cd string, builds []buildRecord) (buildRecord, bool) {
	var out buildRecord
	ok := false
	for _, b := range builds {
		if b.closes(cd[:len(DayFormat)]) && (!ok || b.built > out.built || (b.built == out.built && b.build > out.build)) {
			out, ok = b, true
		}
	}
	return out, ok
}

// currentPrefix is, of the prefixes among builds (of the day "YYYY-MM-DD cluster") begun
// after its newest whole build (begun at after, 0 when none), the one that ends latest (of
// two alike, the newer) and counts every finding of the hours before its end, given when
// each hour of the day last changed, with the hours after it that have findings.
func currentPrefix(cd string, builds []buildRecord, after uint32, changed map[uint32]uint32) (buildRecord, []uint32, bool) {
	var prefixes []buildRecord
	for _, b := range builds {
		if !b.closes(cd[:len(DayFormat)]) && b.built > after {
			prefixes = append(prefixes, b)
		}
	}
	sort.Slice(prefixes, func(i, j int) bool {
		if prefixes[i].until != prefixes[j].until {
			return prefixes[i].until > prefixes[j].until
		}
		return prefixes[i].built > prefixes[j].built
	})
	for _, pr := range prefixes {
		if tail, ok := pr.current(changed); ok {
			return pr, tail, true
		}
	}
	return buildRecord{}, nil, false
}

// readHours returns, for the days ("YYYY-MM-DD cluster", sorted) of cluster ("" for every
// cluster), when each of their hours last changed.
func readHours(ctx context.Context, db *sql.DB, t Tables, cluster string, days []string) (map[string]map[uint32]uint32, error) {
	if len(days) == 0 {
		return nil, nil
	}
	// Sorted, the days begin with the earliest and end with the latest.
	first, err := time.Parse(DayFormat, days[0][:len(DayFormat)])
	if err != nil {
		return nil, err
	}
	last, err := time.Parse(DayFormat, days[len(days)-1][:len(DayFormat)])
	if err != nil {
		return nil, err
	}
	cond, args := hours(cluster, first, last.AddDate(0, 0, 1))
	out := map[string]map[uint32]uint32{}
	err = scan(ctx, db, `SELECT toString(cluster), toString(toDate(hour)), toUInt32(hour), maxMerge(changed), toUInt64(0) FROM `+t.HourChanges+`
WHERE `+cond+` GROUP BY cluster, hour`, args, func(c, d string, hour, changed uint32, _ uint64) {
		if out[pair(d, c)] == nil {
			out[pair(d, c)] = map[uint32]uint32{}
		}
		out[pair(d, c)][hour] = changed
	})
	return out, wrap("read the hours' changes", err)
}

// current reports whether the prefix counts every finding of the hours before its end,
// given when each hour of its day last changed, and returns the hours after it.
func (b buildRecord) current(changed map[uint32]uint32) (tail []uint32, ok bool) {
	for h, ch := range changed {
		switch {
		case h >= b.until:
			tail = append(tail, h)
		case !covers(b.built, ch):
			return nil, false
		}
	}
	sort.Slice(tail, func(i, j int) bool { return tail[i] < tail[j] })
	return tail, true
}

// covers reports whether a build begun at built (Unix seconds, server clock) counts every
// finding of a day last changed at changed.
func covers(built, changed uint32) bool {
	return int64(built) > int64(changed)+int64(margin/time.Second)
}
