// Package status keeps the UpgradeReadiness objects (deploy/crds/upgradereadiness.yaml) of a
// Kubernetes cluster current with the gate's judgements, by server-side apply.
package status

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"flag"
	"fmt"
	"regexp"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	"github.com/auditlens/auditlens/services/report/readiness"
	"github.com/auditlens/auditlens/services/report/weekly"
)

// The resource of the CRD.
var Resource = schema.GroupVersionResource{Group: "auditlens.io", Version: "v1alpha1", Resource: "upgradereadinesses"}

const (
	apiVersion = "auditlens.io/v1alpha1"
	kind       = "UpgradeReadiness"
	// FieldManager owns what report applies.
	FieldManager = "auditlens-report"
	// ConditionReady is the condition pipelines wait on.
	ConditionReady = "Ready"
	maxListed      = 50
)

// Config says whether report keeps the objects (the apiserver: kubeclient.Config).
type Config struct {
	Enabled bool
}

// RegisterFlags registers --readiness-objects.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.BoolVar(&c.Enabled, "readiness-objects", c.Enabled, "keep an UpgradeReadiness object (deploy/crds) per cluster and target version current in the Kubernetes cluster report runs in (or --report-kube-url), every --readiness-interval")
}

// Publisher applies the gate's results as UpgradeReadiness objects.
type Publisher struct {
	res dynamic.NamespaceableResourceInterface
	now func() time.Time
}

// New returns a Publisher talking to the apiserver of rc.
func New(rc *rest.Config) (*Publisher, error) {
	c, err := dynamic.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("readiness objects: %w", err)
	}
	return &Publisher{res: c.Resource(Resource), now: time.Now}, nil
}

var notName = regexp.MustCompile(`[^a-z0-9]+`)

// Name is the object of cluster and target: "<cluster>-<major>-<minor>" when the cluster is
// already a name (lower-case letters, digits and single inner "-": prod-eu-1-34), else the
// cluster lower-cased with every run of other characters as one "-" and the first 8 hex digits
// of the cluster's SHA-256 after it ("Prod EU/1" gives prod-eu-1-<hash>-1-34), so clusters
// that read alike (prod-eu, prod_eu, Prod.EU) never share an object. Publish also refuses an
// object whose spec.cluster is another cluster.
func Name(cluster string, target weekly.Version) (string, error) {
	c := strings.Trim(notName.ReplaceAllString(strings.ToLower(cluster), "-"), "-")
	if c != cluster && c != "" {
		sum := sha256.Sum256([]byte(cluster))
		c += "-" + hex.EncodeToString(sum[:4])
	}
	n := fmt.Sprintf("%s-%d-%d", c, target.Major, target.Minor)
	if c == "" || len(n) > 253 {
		return "", fmt.Errorf("cluster %q makes no object name", cluster)
	}
	return n, nil
}

// Publish applies r: the object (spec: cluster and target) and its status with the
// condition Ready (True ready, False blocked, Unknown unknown) and judgedAt, the time of the
// judgement, renewed by every publish so a reader tells a live gate from a stopped one. A
// condition's lastTransitionTime changes only when its status does. An object of the name
// that names another cluster in its spec is left alone, with an error.
func (p *Publisher) Publish(ctx context.Context, r *readiness.Result) error {
	name, err := Name(r.Cluster, r.Target)
	if err != nil {
		return err
	}
	if cur, err := p.res.Get(ctx, name, metav1.GetOptions{}); err == nil {
		if other, _, _ := unstructured.NestedString(cur.Object, "spec", "cluster"); other != r.Cluster {
			return fmt.Errorf("upgradereadiness %s is cluster %q's, not %q: left alone", name, other, r.Cluster)
		}
	} else if !apierrors.IsNotFound(err) {
		return fmt.Errorf("get upgradereadiness %s: %w", name, err)
	}
	opts := metav1.ApplyOptions{FieldManager: FieldManager, Force: true}
	obj := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": apiVersion, "kind": kind,
		"metadata": map[string]any{"name": name, "labels": map[string]any{"app.kubernetes.io/managed-by": "auditlens-report"}},
		"spec":     map[string]any{"cluster": r.Cluster, "targetVersion": r.Target.String()},
	}}
	cur, err := p.res.Apply(ctx, name, obj, opts)
	if err != nil {
		return fmt.Errorf("apply upgradereadiness %s: %w", name, err)
	}
	now := p.now().UTC().Format(time.RFC3339)
	cond := condition(r)
	cond["observedGeneration"] = cur.GetGeneration()
	cond["lastTransitionTime"] = now
	if old, ok := readyCondition(cur); ok && old["status"] == cond["status"] {
		if t, ok := old["lastTransitionTime"].(string); ok && t != "" {
			cond["lastTransitionTime"] = t
		}
	}
	st := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": apiVersion, "kind": kind,
		"metadata": map[string]any{"name": name},
		"status":   statusOf(r, cond, now),
	}}
	if _, err := p.res.ApplyStatus(ctx, name, st, opts); err != nil {
		if apierrors.IsNotFound(err) {
			return fmt.Errorf("apply upgradereadiness %s status: %w (is deploy/crds/upgradereadiness.yaml applied?)", name, err)
		}
		return fmt.Errorf("apply upgradereadiness %s status: %w", name, err)
	}
	return nil
}

func condition(r *readiness.Result) map[string]any {
	s := "Unknown"
	switch r.State {
	case readiness.Ready:
		s = "True"
	case readiness.Blocked:
		s = "False"
	}
	return map[string]any{"type": ConditionReady, "status": s, "reason": r.Reason, "message": clip(r.Message, 32768)}
}

func readyCondition(u *unstructured.Unstructured) (map[string]any, bool) {
	cs, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, c := range cs {
		if m, ok := c.(map[string]any); ok && m["type"] == ConditionReady {
			return m, true
		}
	}
	return nil, false
}

func statusOf(r *readiness.Result, cond map[string]any, judgedAt string) map[string]any {
	bl := []any{}
	for _, b := range r.Blockers[:min(len(r.Blockers), maxListed)] {
		m := map[string]any{"rule": b.RuleID, "api": b.API(), "removedIn": b.RemovedIn, "findings": int64(b.Findings),
			"callers": int64(b.CallerCount), "lastSeen": b.LastSeen.UTC().Format(time.RFC3339)}
		if b.Expired != nil {
			m["expiredAcceptance"] = fmt.Sprintf("accepted until %s by %s (%s)", b.Expired.Until, b.Expired.By, b.Expired.Source)
		}
		bl = append(bl, m)
	}
	acc := []any{}
	for _, a := range r.Accepted[:min(len(r.Accepted), maxListed)] {
		until := ""
		if !a.Acceptance.Until.IsZero() {
			until = a.Acceptance.Until.String()
		}
		acc = append(acc, map[string]any{"rule": a.RuleID, "api": a.API(), "removedIn": a.RemovedIn, "until": until,
			"by": a.Acceptance.By, "reason": a.Acceptance.Reason})
	}
	return map[string]any{
		"state": r.State, "message": clip(r.Message, 4096), "judgedAt": judgedAt,
		"blockers": int64(len(r.Blockers)), "acceptedBlockers": int64(len(r.Accepted)),
		"windowSeconds": int64(r.WindowEnd.Sub(r.WindowStart) / time.Second), "streamAlive": r.Stream.Alive,
		"blockerList": bl, "accepted": acc,
		"conditions": []any{cond},
	}
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}
