package nodetest

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/transport/spdy"
)

// readyPod returns the name of the Ready pod matching selector in ns (exactly one expected).
func readyPod(ctx context.Context, c *kubernetes.Clientset, ns, selector string) (string, error) {
	pods, err := c.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		return "", err
	}
	var ready []string
	for _, p := range pods.Items {
		if p.DeletionTimestamp != nil {
			continue
		}
		for _, cond := range p.Status.Conditions {
			if cond.Type == corev1.PodReady && cond.Status == corev1.ConditionTrue {
				ready = append(ready, p.Name)
			}
		}
	}
	if len(ready) != 1 {
		return "", fmt.Errorf("%s %s: %d Ready pods %v, want 1", ns, selector, len(ready), ready)
	}
	return ready[0], nil
}

// TestPodsStartWithoutRestarts: on a node this run started, every auditlens pod came up
// without a restart (the services wait for a bus they cannot reach yet, such as a name the
// cluster's DNS does not answer yet, rather than exit). First in the package, before any test
// kills a pod.
func TestPodsStartWithoutRestarts(t *testing.T) {
	need(t)
	if !startedUp {
		t.Skip("the node was up before this run: its pods may have restarted for reasons of their own")
	}
	ctx := context.Background()
	c := mustClient(t)
	for _, ns := range []string{"auditlens", "auditlens-ingest"} {
		pods, err := c.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range pods.Items {
			for _, cs := range p.Status.ContainerStatuses {
				if cs.RestartCount > 0 {
					t.Errorf("%s/%s restarted %d times:\n%s", ns, p.Name, cs.RestartCount,
						describePods(ctx, c, ns, "app.kubernetes.io/name="+p.Labels["app.kubernetes.io/name"]))
				}
			}
		}
	}
}

// waitReadyPod waits up to two minutes for exactly one Ready pod of selector in ns and returns
// its name. A pod that was not Ready at once is logged with the state of every pod of the
// selector (restarts, the last exit, the previous container's last lines): a crash shows there.
func waitReadyPod(ctx context.Context, t *testing.T, c *kubernetes.Clientset, ns, selector string) string {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	waited := false
	for {
		pod, err := readyPod(ctx, c, ns, selector)
		if err == nil {
			if waited {
				t.Logf("%s %s Ready after a wait; its pods:\n%s", ns, selector, describePods(ctx, c, ns, selector))
			}
			return pod
		}
		if time.Now().After(deadline) {
			t.Fatalf("%v after 2m; its pods:\n%s", err, describePods(ctx, c, ns, selector))
		}
		waited = true
		time.Sleep(time.Second)
	}
}

// describePods is what a test failure needs to know of the pods of selector: phase, readiness,
// restarts, the last termination and, after a restart, the previous container's last log lines.
func describePods(ctx context.Context, c *kubernetes.Clientset, ns, selector string) string {
	pods, err := c.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		return err.Error()
	}
	var b strings.Builder
	for _, p := range pods.Items {
		fmt.Fprintf(&b, "pod %s phase %s deleting %v\n", p.Name, p.Status.Phase, p.DeletionTimestamp != nil)
		for _, cond := range p.Status.Conditions {
			fmt.Fprintf(&b, "  condition %s=%s at %s %s\n", cond.Type, cond.Status, cond.LastTransitionTime.UTC().Format(time.RFC3339), cond.Message)
		}
		for _, cs := range p.Status.ContainerStatuses {
			fmt.Fprintf(&b, "  container %s ready %v restarts %d\n", cs.Name, cs.Ready, cs.RestartCount)
			if term := cs.LastTerminationState.Terminated; term != nil {
				fmt.Fprintf(&b, "  last exit %d (%s) at %s: %s\n", term.ExitCode, term.Reason, term.FinishedAt.UTC().Format(time.RFC3339), term.Message)
			}
			if cs.RestartCount > 0 {
				tail := int64(30)
				logs, err := c.CoreV1().Pods(ns).GetLogs(p.Name, &corev1.PodLogOptions{Container: cs.Name, Previous: true, TailLines: &tail}).DoRaw(ctx)
				if err != nil {
					logs = []byte(err.Error())
				}
				fmt.Fprintf(&b, "  previous container's last lines:\n%s\n", logs)
			}
		}
	}
	return b.String()
}

// metrics scrapes a pod's metrics port through the apiserver's pod proxy.
func metrics(ctx context.Context, c *kubernetes.Clientset, ns, pod string) (map[string]float64, error) {
	body, err := c.CoreV1().RESTClient().Get().Namespace(ns).Resource("pods").Name(pod + ":9090").
		SubResource("proxy").Suffix("metrics").DoRaw(ctx)
	if err != nil {
		return nil, err
	}
	m := map[string]float64{}
	sc := bufio.NewScanner(strings.NewReader(string(body)))
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		if v, err := strconv.ParseFloat(line[i+1:], 64); err == nil {
			m[line[:i]] = v
		}
	}
	return m, sc.Err()
}

const (
	publishedFile    = `auditlens_ingest_events_published_total{input="file"}`
	publishedWebhook = `auditlens_ingest_events_published_total{input="webhook"}`
)

// published is how many events the ingest DaemonSet published from the log file and the
// webhook receiver from the apiserver's posts.
func published(ctx context.Context, c *kubernetes.Clientset) (file, webhook float64, err error) {
	ds, err := readyPod(ctx, c, "auditlens-ingest", "app.kubernetes.io/name=auditlens-ingest")
	if err != nil {
		return 0, 0, err
	}
	wh, err := readyPod(ctx, c, "auditlens", "app.kubernetes.io/name=auditlens-webhook")
	if err != nil {
		return 0, 0, err
	}
	m, err := metrics(ctx, c, "auditlens-ingest", ds)
	if err != nil {
		return 0, 0, err
	}
	w, err := metrics(ctx, c, "auditlens", wh)
	if err != nil {
		return 0, 0, err
	}
	return m[publishedFile], w[publishedWebhook], nil
}

// portForward forwards a free local port to the pod's port (client-go's port-forward, as
// kubectl port-forward) until the test ends, and returns the local port.
func portForward(t *testing.T, ns, pod string, port int) int {
	t.Helper()
	cfg, err := restConfig()
	if err != nil {
		t.Fatal(err)
	}
	rt, upgrader, err := spdy.RoundTripperFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(cfg.Host)
	if err != nil {
		t.Fatal(err)
	}
	u.Path = fmt.Sprintf("/api/v1/namespaces/%s/pods/%s/portforward", ns, pod)
	dialer := spdy.NewDialer(upgrader, &http.Client{Transport: rt}, http.MethodPost, u)
	stop, ready := make(chan struct{}), make(chan struct{})
	fw, err := portforward.NewOnAddresses(dialer, []string{"127.0.0.1"}, []string{"0:" + strconv.Itoa(port)}, stop, ready, io.Discard, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() { errc <- fw.ForwardPorts() }()
	t.Cleanup(func() { close(stop) })
	select {
	case <-ready:
	case err := <-errc:
		t.Fatalf("port-forward %s/%s: %v", ns, pod, err)
	case <-time.After(30 * time.Second):
		t.Fatalf("port-forward %s/%s: not ready after 30s", ns, pod)
	}
	ports, err := fw.GetPorts()
	if err != nil || len(ports) != 1 {
		t.Fatalf("port-forward ports: %v %v", ports, err)
	}
	return int(ports[0].Local)
}

// TestConsoleThroughPortForward: a removed-API call appears in the report's console, which
// listens on the pod's loopback only and is reached through a port-forward.
func TestConsoleThroughPortForward(t *testing.T) {
	need(t)
	ctx := context.Background()
	c := mustClient(t)
	l := newLegacyClient(t, c, "nodetest-console")
	var code int
	l.as("removed-api").RESTClient().Get().AbsPath("/apis/extensions/v1beta1/namespaces/" + l.ns + "/ingresses").Do(ctx).StatusCode(&code)
	if code != http.StatusNotFound {
		t.Fatalf("extensions/v1beta1 ingresses: status %d, want 404", code)
	}
	pod := waitReadyPod(ctx, t, c, "auditlens", "app.kubernetes.io/name=auditlens-report")
	local := portForward(t, "auditlens", pod, 9104)
	search := fmt.Sprintf("http://127.0.0.1:%d/search?by=user&q=%s", local, url.QueryEscape(l.ns))
	waitFor(t, 90*time.Second, "the caller on the console's search page", func() (bool, error) {
		resp, err := http.Get(search) //nolint:noctx // a test's short poll
		if err != nil {
			return false, err
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			return false, err
		}
		if resp.StatusCode != http.StatusOK {
			return false, fmt.Errorf("%s: %s", search, resp.Status)
		}
		return strings.Contains(string(body), l.username()), nil
	})
}
