package console_test

import (
	"context"
	"reflect"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/auditlens/auditlens/lib/kubeversion"
	auditlensv1 "github.com/auditlens/auditlens/proto/auditlens/v1"
	"github.com/auditlens/auditlens/services/report/chtest"
	"github.com/auditlens/auditlens/services/report/console"
	"github.com/auditlens/auditlens/services/report/rollup"
	"github.com/auditlens/auditlens/services/report/store"
)

// The blockers and the moves come from one read of the day rows (BlockersAndMoves); the
// moves must be package rollup's (the weekly report's), and the blockers leave out exactly
// the rows the moves fixed. In prod, target 1.26:
//   - ci (a hostile agent) lists ingresses from two IPs and calls networking.k8s.io/v1 after
//     both: moved, its four findings fixed;
//   - bob lists ingresses, calls the successor, then lists them again: not moved, and the
//     day of his later call blocks (the one before his move stays fixed);
//   - carol lists ingresses and uses PodSecurityPolicy, then calls the ingresses' successor:
//     moved off ingresses only;
//   - dave is the one caller of flowcontrol v1beta1 flowschemas and moved: the blocker is
//     gone from the list, its move is listed;
//   - erin calls the successor of an API it never used: no move.
func TestBlockersAndMovesAgreeWithTheRollup(t *testing.T) {
	chtest.EachEngine(t, func(t *testing.T, _ chtest.Engine, st *store.Store) {
		ctx := context.Background()
		at := func(d, h int) time.Time { return weekStart.AddDate(0, 0, d).Add(time.Duration(h) * time.Hour) }
		n := 0
		call := func(d, h int, user, agent, ip, group, version, resource, removedIn string) *auditlensv1.Finding {
			n++
			rule := "removed-api"
			if resource == "podsecuritypolicies" {
				rule = "psp"
			}
			return &auditlensv1.Finding{RuleId: rule, Cluster: "prod", AuditId: "m" + string(rune('a'+n)), EventTime: timestamppb.New(at(d, h)),
				Verb: "list", ApiGroup: group, ApiVersion: version, Resource: resource, Username: user, UserAgent: agent,
				SourceIp: ip, RemovedIn: removedIn, Replacement: "its successor"}
		}
		ing := func(d, h int, user, agent, ip string) *auditlensv1.Finding {
			return call(d, h, user, agent, ip, "extensions", "v1beta1", "ingresses", "1.22")
		}
		ci := "system:serviceaccount:ci:deployer"
		fs := []*auditlensv1.Finding{
			ing(0, 9, ci, hostile, "10.0.0.1"), ing(1, 9, ci, hostile, "10.0.0.1"), ing(1, 10, ci, hostile, "10.0.0.2"), ing(2, 9, ci, hostile, "10.0.0.2"),
			ing(0, 11, "bob", "kubectl/v1.21.0", "10.0.0.9"), ing(5, 11, "bob", "kubectl/v1.21.0", "10.0.0.9"),
			ing(1, 12, "carol", "helm/3.2", "10.0.0.5"),
			call(1, 13, "carol", "helm/3.2", "10.0.0.5", "policy", "v1beta1", "podsecuritypolicies", "1.25"),
			call(2, 14, "dave", "flux/0.1", "10.0.0.6", "flowcontrol.apiserver.k8s.io", "v1beta1", "flowschemas", "1.26"),
			call(3, 14, "dave", "flux/0.1", "10.0.0.6", "flowcontrol.apiserver.k8s.io", "v1beta1", "flowschemas", "1.26"),
		}
		if err := st.WriteFindings(ctx, fs); err != nil {
			t.Fatal(err)
		}
		moved := func(d, h int, user, agent, group, version, resource string) store.MigrationSighting {
			return store.MigrationSighting{Cluster: "prod", APIGroup: group, APIVersion: version, Resource: resource,
				Username: user, UserAgent: agent, Seen: at(d, h)}
		}
		if err := st.WriteMigrationSightings(ctx, []store.MigrationSighting{
			moved(3, 0, ci, hostile, "extensions", "v1beta1", "ingresses"),
			moved(2, 0, "bob", "kubectl/v1.21.0", "extensions", "v1beta1", "ingresses"),
			moved(2, 0, "carol", "helm/3.2", "extensions", "v1beta1", "ingresses"),
			moved(4, 0, "dave", "flux/0.1", "flowcontrol.apiserver.k8s.io", "v1beta1", "flowschemas"),
			moved(4, 0, "erin", "kubectl/v1.30.0", "apps", "v1beta1", "deployments"),
		}); err != nil {
			t.Fatal(err)
		}
		r := console.Reader{DB: st.DB()}
		target := kubeversion.Version{Major: 1, Minor: 26}

		from, to := rollup.Span(week.From, week.To)
		want, wantN, err := rollup.Moves(ctx, st.DB(), rollup.TablesFor("findings"), rollup.Filter{Cluster: "prod", From: from, To: to,
			Where: rollup.Blocking, Args: []any{target.Key()}}, 100)
		if err != nil {
			t.Fatal(err)
		}
		if wantN != 3 || len(want) != 3 || want[0].Username != "dave" || want[1].Username != ci || want[1].Findings != 4 || want[2].Username != "carol" {
			t.Fatalf("rollup.Moves: %d %+v, want dave, ci (4 findings over two IPs) and carol", wantN, want)
		}
		got, gotN, err := r.Migrated(ctx, "prod", week, target, 100)
		if err != nil {
			t.Fatal(err)
		}
		if gotN != wantN || !reflect.DeepEqual(got, want) {
			t.Errorf("Migrated: %d\n%+v\nwant rollup.Moves' %d\n%+v", gotN, got, wantN, want)
		}

		bs, err := r.Blockers(ctx, "prod", week, target)
		if err != nil {
			t.Fatal(err)
		}
		requests := map[string]uint64{}
		var total uint64
		for _, b := range bs {
			requests[b.Key.Resource] = b.Requests
			total += b.Requests
			if b.Key.Resource == "ingresses" && (len(b.Top) != 1 || b.Top[0].Username != "bob") {
				t.Errorf("ingresses' callers %+v, want bob alone", b.Top)
			}
		}
		// bob's ingresses after his move (the one before it stays fixed), carol's PSP; ci's
		// and carol's ingresses and dave's flowschemas are fixed.
		if !reflect.DeepEqual(requests, map[string]uint64{"ingresses": 1, "podsecuritypolicies": 1}) {
			t.Errorf("blockers %+v, want bob's later ingresses and carol's PSP", bs)
		}
		src, args, err := rollup.Days(ctx, st.DB(), rollup.TablesFor("findings"), rollup.Filter{Cluster: "prod", From: from, To: to,
			Where: rollup.Blocking, Args: []any{target.Key()}, Migrated: rollup.Unmigrated})
		if err != nil {
			t.Fatal(err)
		}
		var unmigrated uint64
		if err := st.DB().QueryRowContext(ctx, `SELECT toUInt64(sum(findings)) FROM (`+src+`)`, args...).Scan(&unmigrated); err != nil || total != unmigrated {
			t.Errorf("the blockers count %d findings, the rows rollup.Days leaves unmigrated %d (%v)", total, unmigrated, err)
		}

		both, top, n, err := r.BlockersAndMoves(ctx, "prod", week, target, 2)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(both, bs) || n != wantN || !reflect.DeepEqual(top, want[:2]) {
			t.Errorf("BlockersAndMoves: %+v, %d %+v; want the blockers above and the first 2 of %d moves", both, n, top, wantN)
		}
		if none, n, err := r.Migrated(ctx, "prod", week, target, 0); err != nil || len(none) != 0 || n != wantN {
			t.Errorf("no moves listed: %+v, %d (%v), want none of %d", none, n, err, wantN)
		}
	})
}
