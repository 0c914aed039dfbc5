package rollup_test

import (
	"context"
	"database/sql"
	"fmt"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/auditlens/auditlens/services/report/rollup"
	"github.com/auditlens/auditlens/services/report/store"
)

// sightings are seed's callers' moves (written by writeMoves): ns0's service account moves
// off extensions/v1beta1 ingresses three days ago at noon (its later calls block again), ns1's
// late today (after all its calls), alice on staging only (prod's alice still blocks), and a
// successor call of ns2's an hour before the window (no effect).
func sightings(today time.Time) []store.MigrationSighting {
	ing := func(cluster, user, agent string, at time.Time) store.MigrationSighting {
		return store.MigrationSighting{Cluster: cluster, APIGroup: "extensions", APIVersion: "v1beta1", Resource: "ingresses",
			Username: user, UserAgent: agent, Seen: at}
	}
	return []store.MigrationSighting{
		ing("prod", "system:serviceaccount:ns0:sa", "client-go/v0.19", today.AddDate(0, 0, -3).Add(12*time.Hour)),
		ing("prod", "system:serviceaccount:ns1:sa", "client-go/v0.19", today.Add(23*time.Hour)),
		// An older successor call of the same caller: the newest counts.
		ing("prod", "system:serviceaccount:ns1:sa", "client-go/v0.19", today.AddDate(0, 0, -4)),
		ing("prod", "system:serviceaccount:ns2:sa", "client-go/v0.19", today.AddDate(0, 0, -5).Add(-time.Hour)),
		ing("staging", "alice", "kubectl/v1.20.0", today.Add(23*time.Hour+59*time.Minute+59*time.Second)),
	}
}

// writeMoves stores sightings(today).
func writeMoves(t *testing.T, st *store.Store, today time.Time) {
	t.Helper()
	if err := st.WriteMigrationSightings(context.Background(), sightings(today)); err != nil {
		t.Fatal(err)
	}
}

// movesAgree checks rollup.Days' Unmigrated rows and rollup.Moves against the raw findings and
// the sightings, judged here row by row: a day row is fixed when its caller's newest
// successor call in the window is later than the row's last finding.
func movesAgree(t *testing.T, db *sql.DB, today time.Time, cluster, when string, from, to time.Time) {
	t.Helper()
	ctx := context.Background()
	newest := map[string]uint32{}
	for _, s := range sightings(today) {
		if s.Seen.Before(from) {
			continue
		}
		k := strings.Join([]string{s.Cluster, s.APIGroup, s.APIVersion, s.Resource, s.Username, s.UserAgent}, "|")
		newest[k] = max(newest[k], uint32(s.Seen.Unix()))
	}
	moveOf := func(r row) string { // the sightings' key of a row of fromFindings
		f := strings.Split(r.Key, "|") // cluster, rule, removed_in_key, group, version, resource, removed_in, replacement, user, agent, ...
		return strings.Join([]string{f[0], f[3], f[4], f[5], f[8], f[9]}, "|")
	}
	var want []row
	type caller struct {
		findings uint64
		last     uint32
	}
	callers := map[string]*caller{} // rule|group|version|resource|removed_in|user|agent
	for _, r := range fromFindings(t, db, cluster, from, to) {
		f := strings.Split(r.Key, "|")
		if at := newest[moveOf(r)]; at <= r.Last {
			want = append(want, r)
		}
		k := strings.Join([]string{f[1], f[3], f[4], f[5], f[6], f[8], f[9]}, "|")
		if callers[k] == nil {
			callers[k] = &caller{}
		}
		callers[k].findings += r.Findings
		callers[k].last = max(callers[k].last, r.Last)
	}
	src, args, err := rollup.Days(ctx, db, rollup.TablesFor("findings"), rollup.Filter{Cluster: cluster, From: from, To: to, Migrated: rollup.Unmigrated})
	if err != nil {
		t.Fatal(err)
	}
	got := rows(t, db, `SELECT toString(day) AS d, concat(cluster, '|', `+keyText+`) AS key, toUInt64(sum(findings)),
  toUInt32(min(first_seen)), toUInt32(max(last_seen))
FROM (`+src+`) GROUP BY d, key`, args...)
	if len(want) > 0 {
		sameRows(t, when+", unmigrated", got, want)
	} else if len(got) > 0 {
		t.Errorf("%s: unmigrated rows %v, want none", when, got)
	}
	if len(got) == len(fromFindings(t, db, cluster, from, to)) {
		t.Errorf("%s: no row fixed by a move", when)
	}
	// The console's columns (hashes only) give the same findings per day.
	src, args, err = rollup.Days(ctx, db, rollup.TablesFor("findings"), rollup.Filter{Cluster: cluster, From: from, To: to,
		Migrated: rollup.Unmigrated, Columns: []string{"blocker", "caller"}})
	if err != nil {
		t.Fatal(err)
	}
	perDay := map[string]uint64{}
	for _, r := range want {
		perDay[r.Day] += r.Findings
	}
	hashed := map[string]uint64{}
	for _, r := range rows(t, db, `SELECT toString(day) AS d, '' AS key, toUInt64(sum(findings)), toUInt32(0), toUInt32(0)
FROM (`+src+`) GROUP BY d`, args...) {
		hashed[r.Day] = r.Findings
	}
	if !reflect.DeepEqual(hashed, perDay) {
		t.Errorf("%s: unmigrated findings per day by hashes %v, want %v", when, hashed, perDay)
	}
	// Moves: the callers whose newest successor call is later than their newest finding.
	var wantMoves []string
	for k, c := range callers {
		f := strings.Split(k, "|")
		at := newest[strings.Join([]string{cluster, f[1], f[2], f[3], f[5], f[6]}, "|")]
		if at > c.last {
			wantMoves = append(wantMoves, fmt.Sprintf("%s %d %s", k, c.findings, time.Unix(int64(at), 0).UTC().Format(time.RFC3339)))
		}
	}
	moves, n, err := rollup.Moves(ctx, db, rollup.TablesFor("findings"), rollup.Filter{Cluster: cluster, From: from, To: to}, 10)
	if err != nil {
		t.Fatal(err)
	}
	var gotMoves []string
	for _, m := range moves {
		gotMoves = append(gotMoves, fmt.Sprintf("%s|%s|%s|%s|%s|%s|%s %d %s", m.RuleID, m.APIGroup, m.APIVersion, m.Resource, m.RemovedIn,
			m.Username, m.UserAgent, m.Findings, m.MigratedAt.Format(time.RFC3339)))
	}
	sort.Strings(wantMoves)
	sort.Strings(gotMoves)
	if n != len(wantMoves) || !reflect.DeepEqual(gotMoves, wantMoves) || len(wantMoves) == 0 {
		t.Errorf("%s: moves (%d)\n got %v\nwant %v", when, n, gotMoves, wantMoves)
	}
}
