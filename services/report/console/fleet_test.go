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
	"github.com/auditlens/auditlens/services/report/store"
)

// TestFleet: the window's version spread counts each node or user once, at the release of
// its newest sighting in the window (node-a upgraded its kubelet mid-week), releases in
// numeric order (kubectl 1.9 before 1.10), nothing from before the window or another
// cluster, and a redelivered sighting once.
func TestFleet(t *testing.T) {
	chtest.EachEngine(t, func(t *testing.T, _ chtest.Engine, st *store.Store) {
		at := func(d int) *timestamppb.Timestamp {
			return timestamppb.New(weekStart.AddDate(0, 0, d).Add(9 * time.Hour))
		}
		sighting := func(cluster, id string, d int, rule, user, resource string) *auditlensv1.Finding {
			return &auditlensv1.Finding{RuleId: rule, Cluster: cluster, AuditId: id, EventTime: at(d), Verb: "get",
				Username: user, Resource: resource, Message: "skew"}
		}
		fs := []*auditlensv1.Finding{
			sighting("prod", "s1", 0, "version-skew", "system:node:node-a", "kubelet 1.33"),
			sighting("prod", "s2", 2, "version-skew", "system:node:node-a", "kubelet 1.34"),
			sighting("prod", "s3", 1, "version-skew", "system:node:node-b", "kubelet 1.33"),
			sighting("prod", "s4", 1, "version-skew", "system:node:node-a", "kube-proxy 1.34"),
			sighting("prod", "s5", 3, "kubectl-version-skew", "alice", "kubectl 1.10"),
			sighting("prod", "s6", 3, "kubectl-version-skew", "bob", "kubectl 1.9"),
			sighting("prod", "s7", -2, "version-skew", "system:node:node-c", "kubelet 1.20"),
			sighting("staging", "s8", 1, "version-skew", "system:node:node-z", "kubelet 1.21"),
			// Not a sighting: a removed API named by a kubelet's request.
			{RuleId: "removed-api", Cluster: "prod", AuditId: "r1", EventTime: at(1), Username: "system:node:node-a", Resource: "leases", RemovedIn: "1.22"},
		}
		for range 2 {
			if err := st.WriteFindings(context.Background(), fs); err != nil {
				t.Fatal(err)
			}
		}
		got, err := console.Reader{DB: st.DB()}.Fleet(context.Background(), "prod", week)
		if err != nil {
			t.Fatal(err)
		}
		v := kubeversion.MustParse
		want := []console.FleetRelease{
			{Component: "kube-proxy", Release: v("1.34"), Callers: 1},
			{Component: "kubectl", Release: v("1.9"), Callers: 1},
			{Component: "kubectl", Release: v("1.10"), Callers: 1},
			{Component: "kubelet", Release: v("1.33"), Callers: 1},
			{Component: "kubelet", Release: v("1.34"), Callers: 1},
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("fleet:\n got %+v\nwant %+v", got, want)
		}
		if _, err := (console.Reader{DB: st.DB()}).Fleet(context.Background(), "", week); err == nil {
			t.Error("no cluster: no error")
		}
	})
}

// TestNewestBlocker: the newest use of what blocks one cluster's own target.
func TestNewestBlocker(t *testing.T) {
	chtest.EachEngine(t, func(t *testing.T, _ chtest.Engine, st *store.Store) {
		at := func(d int) time.Time { return weekStart.AddDate(0, 0, d).Add(9 * time.Hour) }
		fs := []*auditlensv1.Finding{
			{RuleId: "version-skew", Cluster: "prod", AuditId: "k1", EventTime: timestamppb.New(at(0)), Username: "system:node:a", Resource: "kubelet 1.33", RemovedIn: "1.37"},
			{RuleId: "version-skew", Cluster: "prod", AuditId: "p1", EventTime: timestamppb.New(at(2)), Username: "system:kube-proxy", Resource: "kube-proxy 1.34", RemovedIn: "1.38"},
			{RuleId: "version-skew", Cluster: "other", AuditId: "o1", EventTime: timestamppb.New(at(4)), Username: "system:node:o", Resource: "kubelet 1.30", RemovedIn: "1.34"},
		}
		if err := st.WriteFindings(context.Background(), fs); err != nil {
			t.Fatal(err)
		}
		r := console.Reader{DB: st.DB()}
		v := kubeversion.MustParse
		for target, want := range map[string]time.Time{"1.37": at(0), "1.38": at(2), "1.36": {}} {
			got, err := r.NewestBlocker(context.Background(), "prod", v(target))
			if err != nil || !got.Equal(want) {
				t.Errorf("newest blocker of %s: %v (%v), want %v", target, got, err, want)
			}
		}
	})
}

// TestCoverage: the kinds of events of a window, from classify's heartbeats: the inputs, the
// levels, and whether a request-body rule saw a body; nothing outside the window or of another
// cluster.
func TestCoverage(t *testing.T) {
	chtest.EachEngine(t, func(t *testing.T, _ chtest.Engine, st *store.Store) {
		at := func(d int) time.Time { return weekStart.AddDate(0, 0, d).Add(9 * time.Hour) }
		if err := st.WriteCoverageSightings(context.Background(), []store.CoverageSighting{
			{Cluster: "prod", Input: "file", Level: "Metadata", Seen: at(0)},
			{Cluster: "prod", Input: "file", Level: "Metadata", Writes: "no-body", Seen: at(1)},
			{Cluster: "prod", Input: "webhook", Level: "Metadata", Seen: at(2)},
			{Cluster: "prod", Input: "firehose eks", Level: "Request", Writes: "body", Seen: at(-3)},
			{Cluster: "staging", Input: "file", Level: "Request", Writes: "body", Seen: at(1)},
		}); err != nil {
			t.Fatal(err)
		}
		r := console.Reader{DB: st.DB()}
		got, err := r.Coverage(context.Background(), "prod", week)
		if err != nil {
			t.Fatal(err)
		}
		want := console.Coverage{Known: true, Inputs: []string{"file", "webhook"}, Levels: []string{"Metadata"}, Bodies: console.BodiesMetadataOnly}
		if !reflect.DeepEqual(got, want) || got.Unchecked() == "" {
			t.Errorf("prod: %+v (unchecked %q), want %+v", got, got.Unchecked(), want)
		}
		if got, err := r.Coverage(context.Background(), "staging", week); err != nil || got.Bodies != console.BodiesSeen || got.Unchecked() != "" {
			t.Errorf("staging: %+v %v", got, err)
		}
		if got, err := r.Coverage(context.Background(), "nosuch", week); err != nil || got.Known || got.Unchecked() != "" {
			t.Errorf("a cluster without heartbeats: %+v %v", got, err)
		}
	})
}
