package nodetest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
)

// The node's host directories (deploy/node): the apiserver's log and ingest's checkpoints.
const (
	auditLog       = "/run/auditlens-node/audit/audit.log"
	checkpointDir  = "/run/auditlens-node/checkpoints"
	containerdSock = "/run/auditlens-node/containerd.sock"
)

// burst makes n removed-API calls as l, Audit-IDs <name>-0..n-1, and returns those ids.
func burst(t *testing.T, l *legacyClient, name string, n int) []string {
	t.Helper()
	var ids []string
	for i := range n {
		req := fmt.Sprintf("%s-%d", name, i)
		var code int
		l.as(req).RESTClient().Get().AbsPath("/apis/extensions/v1beta1/namespaces/" + l.ns + "/replicasets").Do(context.Background()).StatusCode(&code)
		if code != http.StatusNotFound {
			t.Fatalf("%s: status %d, want 404", req, code)
		}
		ids = append(ids, l.auditID(req))
	}
	return ids
}

// exactlyOnce waits until every id has its removed-api finding, then until the findings stop
// changing, and fails on any counted more than once.
func exactlyOnce(t *testing.T, ids []string) {
	t.Helper()
	db := clickhouse(t)
	waitFor(t, 180*time.Second, fmt.Sprintf("the %d findings in ClickHouse", len(ids)), func() (bool, error) {
		got, err := storedFindings(db, ids)
		if err != nil {
			return false, err
		}
		missing := 0
		for _, id := range ids {
			if _, ok := got[id+" removed-api"]; !ok {
				missing++
			}
		}
		return missing == 0, fmt.Errorf("%d of %d missing", missing, len(ids))
	})
	stableFindings(t, db, ids)
	got, err := storedFindings(db, ids)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(ids) {
		t.Errorf("%d findings for %d requests, want one each", len(got), len(ids))
	}
	for k, f := range got {
		if f.count != 1 {
			t.Errorf("%s stored %d times, want once", k, f.count)
		}
	}
}

func podState(ctx context.Context, c *kubernetes.Clientset, ns, name string) (*corev1.Pod, error) {
	return c.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
}

// TestClassifyKilled: classify's pod deleted with no grace, then its container killed under
// the kubelet (SIGKILL through containerd): the Deployment and the kubelet start it again, and
// the requests made before, between and after are each stored once.
func TestClassifyKilled(t *testing.T) {
	need(t)
	ctx := context.Background()
	c := mustClient(t)
	l := newLegacyClient(t, c, "nodetest-classify")
	const sel = "app.kubernetes.io/name=auditlens-classify"
	ids := burst(t, l, "before", 20)

	pod := forceDeleteReady(ctx, t, c, sel)
	ids = append(ids, burst(t, l, "deleted", 20)...) // while no classify runs, or a new one starts
	var next string
	waitFor(t, 120*time.Second, "a new classify pod Ready", func() (bool, error) {
		var err error
		next, err = readyPod(ctx, c, "auditlens", sel)
		return err == nil && next != pod, err
	})

	p, err := podState(ctx, c, "auditlens", next)
	if err != nil {
		t.Fatal(err)
	}
	cs := p.Status.ContainerStatuses[0]
	id := strings.TrimPrefix(cs.ContainerID, "containerd://")
	out, err := exec.Command("ctr", "--address", containerdSock, "--namespace", "k8s.io", "tasks", "kill", "--signal", "SIGKILL", id).CombinedOutput()
	if err != nil {
		t.Fatalf("kill classify's container %s: %v %s", id, err, out)
	}
	ids = append(ids, burst(t, l, "killed", 20)...)
	waitFor(t, 120*time.Second, "classify's container restarted by the kubelet", func() (bool, error) {
		p, err := podState(ctx, c, "auditlens", next)
		if err != nil {
			return false, err
		}
		s := p.Status.ContainerStatuses[0]
		return s.RestartCount > cs.RestartCount && s.Ready, nil
	})
	ids = append(ids, burst(t, l, "after", 20)...)
	exactlyOnce(t, ids)
}

// checkpointOffset is the offset ingest's checkpoint on the host holds for the audit log.
func checkpointOffset() (int64, error) {
	files, err := filepath.Glob(filepath.Join(checkpointDir, "*.json"))
	if err != nil {
		return 0, fmt.Errorf("checkpoints in %s: %w", checkpointDir, err)
	}
	if len(files) != 1 {
		return 0, fmt.Errorf("checkpoints in %s: %v, want one", checkpointDir, files)
	}
	b, err := os.ReadFile(files[0])
	if err != nil {
		return 0, err
	}
	var cp struct {
		Offset int64 `json:"offset"`
	}
	return cp.Offset, json.Unmarshal(b, &cp)
}

// lastOffsetOf is the offset just past the last line of the audit log holding one of ids
// (they sit in the current file: the node's log rotates at 100 MB).
func lastOffsetOf(ids []string) (int64, error) {
	b, err := os.ReadFile(auditLog)
	if err != nil {
		return 0, err
	}
	end := int64(-1)
	for _, id := range ids {
		i := bytes.LastIndex(b, []byte(`"auditID":"`+id+`"`))
		if i < 0 {
			return 0, fmt.Errorf("%s not in %s", id, auditLog)
		}
		nl := bytes.IndexByte(b[i:], '\n')
		if nl < 0 {
			return 0, fmt.Errorf("%s: line not finished", id)
		}
		end = max(end, int64(i+nl+1))
	}
	return end, nil
}

// TestIngestRollingUpdate: a rolling update of the ingest DaemonSet (a new pod template) while
// requests go on. The new pod resumes from the checkpoint on the host (its log says so and it
// publishes fewer events than the log holds: it did not start over), the checkpoint passes the
// requests made during the update (the file input published them: no loss), and each is
// stored once.
func TestIngestRollingUpdate(t *testing.T) {
	need(t)
	ctx := context.Background()
	c := mustClient(t)
	l := newLegacyClient(t, c, "nodetest-rollout")
	const ns, sel = "auditlens-ingest", "app.kubernetes.io/name=auditlens-ingest"
	ids := burst(t, l, "before", 20)
	old := waitReadyPod(ctx, t, c, ns, sel)
	patch := fmt.Sprintf(`{"spec":{"template":{"metadata":{"annotations":{"nodetest.auditlens.io/restartedAt":%q}}}}}`, time.Now().Format(time.RFC3339Nano))
	if _, err := c.AppsV1().DaemonSets(ns).Patch(ctx, "ingest", types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	during := burst(t, l, "during", 30)
	ids = append(ids, during...)
	var next string
	waitFor(t, 120*time.Second, "the new ingest pod Ready", func() (bool, error) {
		var err error
		next, err = readyPod(ctx, c, ns, sel)
		return err == nil && next != old, err
	})
	ids = append(ids, burst(t, l, "after", 20)...)

	logs, err := c.CoreV1().Pods(ns).GetLogs(next, &corev1.PodLogOptions{}).DoRaw(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(logs, []byte("resuming from checkpoint")) || bytes.Contains(logs, []byte("no checkpoint")) {
		t.Fatalf("the new ingest pod did not resume from the checkpoint:\n%s", logs)
	}
	end, err := lastOffsetOf(during)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 120*time.Second, "the checkpoint past the requests made during the update", func() (bool, error) {
		off, err := checkpointOffset()
		return err == nil && off >= end, err
	})
	exactlyOnce(t, ids)
	m, err := metrics(ctx, c, ns, next)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(auditLog)
	if err != nil {
		t.Fatal(err)
	}
	lines := bytes.Count(b, []byte{'\n'})
	if n := m[publishedFile]; n <= 0 || n >= float64(lines) {
		t.Errorf("the new ingest pod published %v events from the file, want some but fewer than the %d lines of the log (it resumed)", n, lines)
	}
}

// TestReportRestarted: the report pod deleted (its writer drains or not): requests made before
// and while it is gone are each stored once after its replacement starts.
func TestReportRestarted(t *testing.T) {
	need(t)
	ctx := context.Background()
	c := mustClient(t)
	l := newLegacyClient(t, c, "nodetest-report")
	const sel = "app.kubernetes.io/name=auditlens-report"
	ids := burst(t, l, "before", 20)
	pod := forceDeleteReady(ctx, t, c, sel)
	ids = append(ids, burst(t, l, "gone", 20)...)
	waitFor(t, 120*time.Second, "a new report pod Ready", func() (bool, error) {
		next, err := readyPod(ctx, c, "auditlens", sel)
		return err == nil && next != pod, err
	})
	ids = append(ids, burst(t, l, "after", 20)...)
	exactlyOnce(t, ids)
}

// forceDeleteReady deletes the Ready pod of selector in namespace auditlens with no grace
// period (as `kubectl delete --force --grace-period=0`) and returns its name.
func forceDeleteReady(ctx context.Context, t *testing.T, c *kubernetes.Clientset, selector string) string {
	t.Helper()
	pod := waitReadyPod(ctx, t, c, "auditlens", selector)
	zero := int64(0)
	if err := c.CoreV1().Pods("auditlens").Delete(ctx, pod, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
		t.Fatal(err)
	}
	return pod
}
