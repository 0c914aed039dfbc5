package nodetest

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
)

// TestUpgradeReadinessOnTheNode: the overlay's readiness gate keeps upgradereadiness/node-1-38
// current (the node runs 1.37), as `kubectl wait --for=condition=Ready` reads it. The node's own
// kubelet blocks it where it fails already: on a cgroup v1 host (this project's machines:
// node-cgroup-v1, unsupported from 1.35) and with containerd 1.x (Debian's: node-container-runtime,
// unsupported from 1.36). Each blocker is named exactly when its cause holds.
func TestUpgradeReadinessOnTheNode(t *testing.T) {
	need(t)
	cfg, err := restConfig()
	if err != nil {
		t.Fatal(err)
	}
	dc, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	v1 := cgroupV1Host(t)
	n, err := mustClient(t).CoreV1().Nodes().Get(context.Background(), nodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	containerd1 := strings.HasPrefix(n.Status.NodeInfo.ContainerRuntimeVersion, "containerd://1.")
	want := map[string]bool{"node-cgroup-v1": v1, "node-container-runtime": containerd1}
	gvr := schema.GroupVersionResource{Group: "auditlens.io", Version: "v1alpha1", Resource: "upgradereadinesses"}
	var state string
	var obj *unstructured.Unstructured
	waitFor(t, 180*time.Second, "upgradereadiness/node-1-38 judged with the node's kubelet", func() (bool, error) {
		obj, err = dc.Resource(gvr).Get(context.Background(), "node-1-38", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		state, _, _ = unstructured.NestedString(obj.Object, "status", "state")
		for rule, blocks := range want {
			if blocksOn(obj, rule) != blocks {
				return false, fmt.Errorf("state %q, %s among the blockers: %v, want %v", state, rule, !blocks, blocks)
			}
		}
		return state != "unknown", fmt.Errorf("state %q", state)
	})
	conds, _, _ := unstructured.NestedSlice(obj.Object, "status", "conditions")
	ready := ""
	for _, c := range conds {
		if m, ok := c.(map[string]any); ok && m["type"] == "Ready" {
			ready, _ = m["status"].(string)
		}
	}
	if want := map[bool]string{true: "False", false: "True"}[v1 || containerd1]; ready != want {
		t.Errorf("Ready condition %q, want %q (state %s)", ready, want, state)
	}
	t.Logf("upgradereadiness/node-1-38: %s (cgroup v1 %v, containerd 1.x %v)", state, v1, containerd1)
}

// blocksOn reports whether the object's blocker list names rule.
func blocksOn(obj *unstructured.Unstructured, rule string) bool {
	list, _, _ := unstructured.NestedSlice(obj.Object, "status", "blockerList")
	for _, b := range list {
		if m, ok := b.(map[string]any); ok && m["rule"] == rule {
			return true
		}
	}
	return false
}
