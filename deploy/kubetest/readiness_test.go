package kubetest

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	"github.com/auditlens/auditlens/deploy/kubetest/kubeapiserver"
	"github.com/auditlens/auditlens/services/report/owners"
	"github.com/auditlens/auditlens/services/report/readiness"
	"github.com/auditlens/auditlens/services/report/readiness/status"
	"github.com/auditlens/auditlens/services/report/weekly"
)

// reportToken is a static token of report's service account, so that the test acts with
// exactly the RBAC of deploy/crds/rbac.yaml.
const reportToken = "auditlens-test-report-token"

// TestUpgradeReadinessObjects applies deploy/crds (the CRD and its RBAC) to a real
// kube-apiserver, then publishes the gate's judgements as report's service account: a
// waiter that watches the object as `kubectl wait --for=condition=Ready` does sees Ready
// False (BlockersInUse), then Unknown (AuditStreamSilent), and returns once it is True; a
// repeated judgement changes nothing on the server.
func TestUpgradeReadinessObjects(t *testing.T) {
	s := kubeapiserver.Start(t, kubeapiserver.Options{Tokens: []string{
		reportToken + `,system:serviceaccount:auditlens:report,report-uid,"system:serviceaccounts,system:serviceaccounts:auditlens"`}})
	w := &warnings{}
	a := newApplier(t, s, w)
	for _, path := range []string{"../crds/upgradereadiness.yaml", "../crds/rbac.yaml"} {
		for _, obj := range decodeAll(t, path) {
			if err := a.apply(obj, false); err != nil {
				t.Fatalf("apply %s %s: %v", obj.GetKind(), obj.GetName(), err)
			}
		}
		if l := w.take(); len(l) > 0 {
			t.Fatalf("warnings applying %s: %q", path, l)
		}
		if path == "../crds/upgradereadiness.yaml" {
			waitFor(t, 30*time.Second, "the UpgradeReadiness kind served", func() bool {
				a.mapper.Reset()
				_, err := a.mapper.RESTMapping(schema.GroupKind{Group: "auditlens.io", Kind: "UpgradeReadiness"}, "v1alpha1")
				return err == nil
			})
		}
	}

	asReport := &rest.Config{Host: s.URL, BearerToken: reportToken, TLSClientConfig: rest.TLSClientConfig{Insecure: true}, WarningHandler: w}
	pub, err := status.New(asReport)
	if err != nil {
		t.Fatal(err)
	}
	admin := dynamic.NewForConfigOrDie(s.Config(w)).Resource(status.Resource)
	target := weekly.Version{Major: 1, Minor: 34}
	name, err := status.Name("Prod EU/1", target)
	if err != nil || !regexp.MustCompile(`^prod-eu-1-[0-9a-f]{8}-1-34$`).MatchString(name) {
		t.Fatalf("Name = %q, %v; want prod-eu-1-<8 hex>-1-34", name, err)
	}
	if _, err := status.Name("///", target); err == nil {
		t.Error("a cluster of only punctuation makes a name")
	}
	// Clusters that read alike have objects of their own; a name already a name is kept.
	names := map[string]string{}
	for _, c := range []string{"prod-eu", "prod_eu", "Prod.EU", "PROD-EU"} {
		n, err := status.Name(c, target)
		if err != nil {
			t.Fatal(err)
		}
		if o, dup := names[n]; dup {
			t.Errorf("clusters %q and %q share the object %s", o, c, n)
		}
		names[n] = c
	}
	if n, _ := status.Name("prod-eu", target); n != "prod-eu-1-34" {
		t.Errorf("Name(prod-eu) = %q, want prod-eu-1-34", n)
	}

	start := time.Date(2026, 11, 23, 0, 0, 0, 0, time.UTC)
	result := func(state string) *readiness.Result {
		r := &readiness.Result{Cluster: "Prod EU/1", Target: target, State: state, Ready: state == readiness.Ready,
			WindowStart: start, WindowEnd: start.AddDate(0, 0, 7), Stream: readiness.Stream{Alive: state != readiness.Unknown}}
		switch state {
		case readiness.Blocked:
			r.Reason, r.Message = readiness.ReasonBlockers, "1 blocker(s) of 1.34 in use"
			r.Blockers = []weekly.Blocker{{Key: weekly.Key{RuleID: "removed-api", APIGroup: "flowcontrol.apiserver.k8s.io",
				APIVersion: "v1beta3", Resource: "flowschemas", RemovedIn: "1.32"}, Findings: 7, CallerCount: 2, LastSeen: start.Add(time.Hour),
				Expired: &weekly.Acceptance{Until: weekly.Date{Time: start}, By: "ops@example.com", Source: "acks.yaml:3"}}}
			r.Accepted = []weekly.Accepted{{Blocker: weekly.Blocker{Key: weekly.Key{RuleID: "psp", APIGroup: "policy", APIVersion: "v1beta1",
				Resource: "podsecuritypolicies", RemovedIn: "1.25"}}, Acceptance: weekly.Acceptance{Until: weekly.Date{Time: start.AddDate(0, 1, 0)},
				By: "sec@example.com", Reason: "legacy tenant, migrating"}}}
		case readiness.Unknown:
			r.Reason, r.Message = readiness.ReasonStreamSilent, "no findings for 3h"
		default:
			r.Reason, r.Message = readiness.ReasonNoBlockers, "nothing removed at or before 1.34 was used"
		}
		return r
	}

	// The waiter, as kubectl wait: watch the one object, report each Ready condition seen,
	// return when it is True.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	seen := make(chan string, 16)
	done := make(chan error, 1)
	go func() {
		done <- waitReady(ctx, admin, name, seen)
	}()

	ready := func(want string) map[string]any {
		t.Helper()
		select {
		case got := <-seen:
			if got != want {
				t.Fatalf("the waiter saw Ready %s, want %s", got, want)
			}
		case <-ctx.Done():
			t.Fatalf("the waiter saw no Ready %s", want)
		}
		u, err := admin.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return u.Object
	}

	if err := pub.Publish(ctx, result(readiness.Blocked)); err != nil {
		t.Fatal(err)
	}
	obj := ready("False/BlockersInUse")
	if got, _, _ := unstructured.NestedString(obj, "spec", "cluster"); got != "Prod EU/1" {
		t.Errorf("spec.cluster %q", got)
	}
	if n, _, _ := unstructured.NestedInt64(obj, "status", "blockers"); n != 1 {
		t.Errorf("status.blockers %d, want 1", n)
	}
	if n, _, _ := unstructured.NestedInt64(obj, "status", "acceptedBlockers"); n != 1 {
		t.Errorf("status.acceptedBlockers %d, want 1", n)
	}
	bl, _, _ := unstructured.NestedSlice(obj, "status", "blockerList")
	if len(bl) != 1 || fmt.Sprint(bl[0].(map[string]any)["api"]) != "flowcontrol.apiserver.k8s.io/v1beta3 flowschemas" ||
		bl[0].(map[string]any)["expiredAcceptance"] == nil {
		t.Errorf("status.blockerList %v", bl)
	}
	firstTransition := transition(t, obj)

	// Blocked again, a second later: judgedAt is renewed (a live gate), the transition kept.
	judged := func() string {
		u, err := admin.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		j, _, _ := unstructured.NestedString(u.Object, "status", "judgedAt")
		if _, err := time.Parse(time.RFC3339, j); err != nil {
			t.Fatalf("status.judgedAt %q: %v", j, err)
		}
		if tt := transition(t, u.Object); tt != firstTransition {
			t.Errorf("the same judgement moved lastTransitionTime %s -> %s", firstTransition, tt)
		}
		return j
	}
	before := judged()
	time.Sleep(1100 * time.Millisecond) // the times have whole seconds
	if err := pub.Publish(ctx, result(readiness.Blocked)); err != nil {
		t.Fatal(err)
	}
	if after := judged(); after == before {
		t.Errorf("the same judgement a second later left judgedAt at %s: a stopped gate would look alive", before)
	}

	// An object of the name that is another cluster's is left alone.
	squatter := result(readiness.Ready)
	squatter.Cluster = "prod-eu-squat"
	sq, _ := status.Name(squatter.Cluster, target)
	if _, err := admin.Create(ctx, &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "auditlens.io/v1alpha1", "kind": "UpgradeReadiness", "metadata": map[string]any{"name": sq},
		"spec": map[string]any{"cluster": "someone-else", "targetVersion": "1.34"}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := pub.Publish(ctx, squatter); err == nil || !strings.Contains(err.Error(), `is cluster "someone-else"'s`) {
		t.Errorf("publishing over another cluster's object: %v, want an error naming it", err)
	}
	if u, err := admin.Get(ctx, sq, metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	} else if c, _, _ := unstructured.NestedString(u.Object, "spec", "cluster"); c != "someone-else" {
		t.Errorf("the other cluster's object now says spec.cluster %q", c)
	}

	time.Sleep(1100 * time.Millisecond) // lastTransitionTime has whole seconds
	if err := pub.Publish(ctx, result(readiness.Unknown)); err != nil {
		t.Fatal(err)
	}
	obj = ready("Unknown/AuditStreamSilent")
	if tt := transition(t, obj); tt == firstTransition {
		t.Errorf("lastTransitionTime %s kept from False to Unknown", tt)
	}
	if err := pub.Publish(ctx, result(readiness.Ready)); err != nil {
		t.Fatal(err)
	}
	ready("True/NoBlockers")
	if err := <-done; err != nil {
		t.Fatalf("the waiter: %v", err)
	}
	if l := w.take(); len(l) > 0 {
		t.Errorf("warnings publishing: %q", l)
	}

	// report's account may not delete, nor touch other resources.
	if err := dynamic.NewForConfigOrDie(asReport).Resource(status.Resource).Delete(ctx, name, metav1.DeleteOptions{}); err == nil {
		t.Error("report's service account may delete UpgradeReadiness objects: the RBAC grants too much")
	}

	// --owners-namespace-labels: report's account lists the namespaces; a team owns the
	// callers of the namespaces labelled for it.
	nsRes := dynamic.NewForConfigOrDie(s.Config(w)).Resource(schema.GroupVersionResource{Version: "v1", Resource: "namespaces"})
	for name, team := range map[string]string{"shop-frontend": "web", "shop-db": "data", "misc": ""} {
		ns := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Namespace",
			"metadata": map[string]any{"name": name, "labels": map[string]any{"example.com/team": team}}}}
		if _, err := nsRes.Apply(ctx, name, ns, metav1.ApplyOptions{FieldManager: "auditlens-test"}); err != nil {
			t.Fatal(err)
		}
	}
	nss, err := owners.NewNamespaces(asReport)
	if err != nil {
		t.Fatal(err)
	}
	if err := nss.Refresh(ctx); err != nil {
		t.Fatalf("list namespaces as report: %v", err)
	}
	own, err := owners.Parse("owners.yaml", []byte(`schema_version: 1
teams:
  - name: web
    email: [web@example.com]
    namespace_labels: {example.com/team: web}
  - name: data
    email: [data@example.com]
    namespace_labels: {example.com/team: data}
`))
	if err != nil {
		t.Fatal(err)
	}
	own = own.WithLabels(nss.Labels)
	for ns, want := range map[string]string{"shop-frontend": "web", "shop-db": "data", "misc": "", "gone": ""} {
		if got := own.Owner("alice", "kubectl/v1.34.0", ns); got != want {
			t.Errorf("owner of a caller in namespace %s: %q, want %q", ns, got, want)
		}
	}
}

// waitReady watches object name until its Ready condition is True, sending each Ready
// condition it sees ("status/reason") to seen.
func waitReady(ctx context.Context, res dynamic.NamespaceableResourceInterface, name string, seen chan<- string) error {
	wi, err := res.Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + name})
	if err != nil {
		return err
	}
	defer wi.Stop()
	last := ""
	for ev := range wi.ResultChan() {
		if ev.Type != watch.Added && ev.Type != watch.Modified {
			continue
		}
		u, ok := ev.Object.(*unstructured.Unstructured)
		if !ok {
			continue
		}
		cs, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
		for _, c := range cs {
			m, _ := c.(map[string]any)
			if m["type"] != status.ConditionReady {
				continue
			}
			now := fmt.Sprintf("%v/%v", m["status"], m["reason"])
			if now != last {
				last = now
				seen <- now
			}
			if m["status"] == "True" {
				return nil
			}
		}
	}
	return fmt.Errorf("watch ended: %w", ctx.Err())
}

func transition(t *testing.T, obj map[string]any) string {
	t.Helper()
	cs, _, _ := unstructured.NestedSlice(obj, "status", "conditions")
	for _, c := range cs {
		if m := c.(map[string]any); m["type"] == status.ConditionReady {
			return fmt.Sprint(m["lastTransitionTime"])
		}
	}
	t.Fatal("no Ready condition")
	return ""
}
