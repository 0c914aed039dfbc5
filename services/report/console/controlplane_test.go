package console_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/auditlens/auditlens/lib/kubeversion"
	auditlensv1 "github.com/auditlens/auditlens/proto/auditlens/v1"
	"github.com/auditlens/auditlens/services/report/chtest"
	"github.com/auditlens/auditlens/services/report/console"
	"github.com/auditlens/auditlens/services/report/store"
)

// hostileCluster is a cluster name that breaks SQL pasted as text.
const hostileCluster = `it's "prod"\'`

// seedControlPlane writes, each twice (a redelivery), the control plane's sightings the
// tests read, on the days after weekStart (d 10:00 is day d at 10:00):
//   - prod: the apiserver at 1.36 on day 0, upgraded to 1.37 on day 1 at 10:02 (the
//     controller manager follows at 10:05, the scheduler's two releases answer side by side
//     at 10:03), still at 1.37 on day 2, rolled back to 1.36 on day 3 at 09:00;
//   - managed: no apiserver in the audit log, a controller manager at 1.9 and 1.10 in the
//     same minute and a scheduler at 1.8;
//   - the hostile cluster name: an apiserver at 1.30.
//
// And one finding of a kubelet at 1.33 in cluster nodes-only, which sent no sighting. On a
// single server (merge) the parts are merged, as they will be in time: the answers about
// past days must not depend on the rows merges replace.
func seedControlPlane(t *testing.T, st *store.Store, merge bool) {
	t.Helper()
	at := func(d int, hm string) time.Time {
		c, err := time.Parse("15:04", hm)
		if err != nil {
			t.Fatal(err)
		}
		return weekStart.AddDate(0, 0, d).Add(time.Duration(c.Hour())*time.Hour + time.Duration(c.Minute())*time.Minute)
	}
	s := func(cluster, component, v string, d int, hm string) store.ControlPlaneSighting {
		return store.ControlPlaneSighting{Cluster: cluster, Component: component, Version: kubeversion.MustParse(v), Seen: at(d, hm)}
	}
	ss := []store.ControlPlaneSighting{
		s("prod", "kube-apiserver", "1.36", 0, "10:00"),
		s("prod", "kube-apiserver", "1.36", 1, "10:01"),
		s("prod", "kube-apiserver", "1.37", 1, "10:02"),
		s("prod", "kube-apiserver", "1.37", 2, "10:00"),
		s("prod", "kube-controller-manager", "1.36", 1, "10:04"),
		s("prod", "kube-controller-manager", "1.37", 1, "10:05"),
		s("prod", "kube-scheduler", "1.37", 1, "10:03"),
		s("prod", "kube-scheduler", "1.36", 1, "10:03"),
		s("prod", "kube-apiserver", "1.36", 3, "09:00"),
		s("managed", "kube-controller-manager", "1.10", 0, "10:00"),
		s("managed", "kube-controller-manager", "1.9", 0, "10:00"),
		s("managed", "kube-scheduler", "1.8", 0, "11:00"),
		s(hostileCluster, "kube-apiserver", "1.30", 0, "10:00"),
	}
	for range 2 {
		if err := st.WriteControlPlaneSightings(context.Background(), ss); err != nil {
			t.Fatal(err)
		}
	}
	if merge {
		if _, err := st.DB().Exec("OPTIMIZE TABLE control_plane_sightings FINAL"); err != nil {
			t.Fatal(err)
		}
	}
	kubelet := &auditlensv1.Finding{RuleId: "beta-node-label", Cluster: "nodes-only", AuditId: "k1", EventTime: timestamppb.New(at(0, "10:00")),
		Verb: "patch", RequestUri: "/api/v1/nodes/n1", ApiVersion: "v1", Resource: "nodes", Name: "n1", Username: "system:node:n1",
		UserAgent: "kubelet/v1.33.2 (linux/amd64) kubernetes/abc", SourceIp: "10.0.0.5"}
	if err := st.WriteFindings(context.Background(), []*auditlensv1.Finding{kubelet}); err != nil {
		t.Fatal(err)
	}
}

func TestControlPlane(t *testing.T) {
	chtest.EachEngine(t, func(t *testing.T, _ chtest.Engine, st *store.Store) {
		seedControlPlane(t, st, true)
		testControlPlane(t, console.Reader{DB: st.DB()})
	})
}

// TestControlPlaneOnCluster reads the sightings through a cluster's Distributed table
// (2 shards x 2 replicas): as on one server.
func TestControlPlaneOnCluster(t *testing.T) {
	c := chtest.StartCluster(t, 2, 2)
	st := c.Store(t, "auditlens")
	seedControlPlane(t, st, false)
	c.WaitReplicated(t, "auditlens")
	testControlPlane(t, console.Reader{DB: st.DB(), Table: "auditlens.findings"})
}

func testControlPlane(t *testing.T, r console.Reader) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	day := func(d int, h, m int) time.Time {
		return weekStart.AddDate(0, 0, d).Add(time.Duration(h)*time.Hour + time.Duration(m)*time.Minute)
	}
	// format is "component release day HH:MM; ..." of sightings.
	format := func(ss []kubeversion.Sighting) string {
		out := ""
		for _, s := range ss {
			out += fmt.Sprintf("%s %s %s; ", s.Component, s.Version, s.At.Format("02 15:04"))
		}
		return out
	}
	for _, c := range []struct {
		cluster string
		until   time.Time
		want    string
	}{
		{"prod", day(0, 9, 59), ""},
		{"prod", day(0, 10, 0), "kube-apiserver 1.36 23 10:00; "},
		{"prod", day(1, 10, 2), "kube-apiserver 1.37 24 10:02; "},
		// The scheduler's two releases in one minute: the newer.
		{"prod", day(1, 10, 4), "kube-apiserver 1.37 24 10:02; kube-controller-manager 1.36 24 10:04; kube-scheduler 1.37 24 10:03; "},
		// The end of a day: the release running on past it, as of that day.
		{"prod", day(2, 0, 0), "kube-apiserver 1.37 24 10:02; kube-controller-manager 1.37 24 10:05; kube-scheduler 1.37 24 10:03; "},
		{"prod", day(3, 0, 0), "kube-apiserver 1.37 25 10:00; kube-controller-manager 1.37 24 10:05; kube-scheduler 1.37 24 10:03; "},
		// The rollback: the older release, seen later.
		{"prod", day(7, 0, 0), "kube-apiserver 1.36 26 09:00; kube-controller-manager 1.37 24 10:05; kube-scheduler 1.37 24 10:03; "},
		// 1.10 is newer than 1.9 (a number, not text).
		{"managed", day(1, 0, 0), "kube-controller-manager 1.10 23 10:00; kube-scheduler 1.8 23 11:00; "},
		{hostileCluster, day(1, 0, 0), "kube-apiserver 1.30 23 10:00; "},
		{"nodes-only", day(1, 0, 0), ""},
	} {
		got, err := r.ControlPlane(ctx, c.cluster, c.until)
		if err != nil {
			t.Fatalf("ControlPlane(%q, %s): %v", c.cluster, c.until, err)
		}
		if format(got) != c.want {
			t.Errorf("ControlPlane(%q, %s):\n got %s\nwant %s", c.cluster, c.until.Format(time.DateTime), format(got), c.want)
		}
		if c.want == "" && got != nil {
			t.Errorf("ControlPlane(%q, %s) = %#v, want nil", c.cluster, c.until, got)
		}
	}
	for _, c := range []struct {
		cluster  string
		until    time.Time
		want     string
		wantWhy  string
		whatCase string
	}{
		{"prod", day(1, 10, 4), "1.37", "the kube-apiserver's user agent, seen 2026-11-24 10:02 UTC", "the apiserver moved first"},
		{"prod", day(7, 0, 0), "1.36", "the kube-apiserver's user agent, seen 2026-11-26 09:00 UTC", "rolled back"},
		{"managed", day(1, 0, 0), "1.10", "the kube-controller-manager's user agent, seen 2026-11-23 10:00 UTC", "no apiserver: the newest component"},
		{"nodes-only", day(1, 0, 0), "1.33", "the newest kubelet or controller manager agent among the findings", "no sighting: the findings"},
		{"nodes-only", day(40, 0, 0), "", "", "the findings older than 30 days"},
		{"nowhere", day(1, 0, 0), "", "", "nothing known"},
	} {
		v, why, err := r.ClusterRelease(ctx, c.cluster, c.until)
		if err != nil {
			t.Fatalf("%s: ClusterRelease: %v", c.whatCase, err)
		}
		if v.String() != c.want || why != c.wantWhy {
			t.Errorf("%s: ClusterRelease(%q, %s) = %q, %q; want %q, %q", c.whatCase, c.cluster, c.until.Format(time.DateTime), v, why, c.want, c.wantWhy)
		}
	}
	if _, err := r.ControlPlane(ctx, "", day(1, 0, 0)); err == nil {
		t.Error("ControlPlane of no cluster: no error")
	}
}
