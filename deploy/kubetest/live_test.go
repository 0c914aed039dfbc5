package kubetest

import (
	"bufio"
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"database/sql"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"maps"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	_ "github.com/ClickHouse/clickhouse-go/v2"
	appsv1 "k8s.io/api/apps/v1"
	certv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"

	"github.com/auditlens/auditlens/deploy/kubetest/kubeapiserver"
	"github.com/auditlens/auditlens/services/report/chtest"
)

// TestLiveAPIServerThroughThePipeline: a real kube-apiserver, with deploy/audit-policy.yaml,
// writes its audit log and posts the same events to ingest's webhook over TLS with a bearer
// token (a kubeconfig in the shape of deploy/webhook-kubeconfig.yaml). One ingest follows the
// file and serves the webhook; classify and report carry the findings into ClickHouse 18.16.
// Requests driven through client-go, each with its own Audit-ID, must give exactly the expected
// (audit_id, rule_id) set, each counted once although both inputs saw every event.
func TestLiveAPIServerThroughThePipeline(t *testing.T) {
	ch := chtest.StartServer(t)
	dir := t.TempDir()
	bins := buildServices(t, dir)

	// Webhook TLS (a CA and a serving certificate for 127.0.0.1) and token.
	caFile, certFile, keyFile := writeTLS(t, dir)
	token := "live-webhook-token-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	tokenFile := filepath.Join(dir, "webhook-token")
	if err := os.WriteFile(tokenFile, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	webhookAddr := freeAddr(t)
	webhookConfig := writeWebhookConfig(t, dir, "https://"+webhookAddr+"/audit", caFile, token)

	auditLog := filepath.Join(dir, "audit", "audit.log")
	if err := os.MkdirAll(filepath.Dir(auditLog), 0o700); err != nil {
		t.Fatal(err)
	}
	// As on a node: the file exists before its follower starts (the apiserver appends to it).
	if err := os.WriteFile(auditLog, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	natsAddr, metricsAddr := freeAddr(t), freeAddr(t)
	common := []string{"--cluster", "live", "--log-format", "json"}
	remote := append([]string{"--nats-url", "nats://" + natsAddr, "--metrics-addr", ""}, common...)
	run(t, dir, bins, "ingest", append([]string{"--nats-url", "embedded", "--nats-store-dir", filepath.Join(dir, "nats"),
		"--nats-embedded-listen", natsAddr, "--metrics-addr", metricsAddr,
		"--audit-log", auditLog, "--checkpoint-dir", filepath.Join(dir, "checkpoints"), "--audit-log-poll-interval", "50ms",
		"--webhook-addr", webhookAddr, "--webhook-tls-cert", certFile, "--webhook-tls-key", keyFile, "--webhook-token-file", tokenFile}, common...)...)
	waitFor(t, 60*time.Second, "ingest's NATS and webhook", func() bool { return dial(natsAddr) && dial(webhookAddr) })
	run(t, dir, bins, "classify", remote...)
	// No console: its default port (127.0.0.1:9104) may be another process's on this machine.
	run(t, dir, bins, "report", append([]string{"--clickhouse-dsn", ch.DSN("auditlens"), "--report-batch-size", "50", "--report-batch-max-wait", "100ms",
		"--report-console-addr="}, remote...)...)

	s := kubeapiserver.Start(t, kubeapiserver.Options{AuditPolicy: "../audit-policy.yaml", AuditLog: auditLog,
		AuditWebhookConfig: webhookConfig, Args: []string{"--runtime-config=" + deprecatedAPI.runtimeConfig + "=true"}})

	want := drive(t, s)

	db, err := sql.Open("clickhouse", ch.DSN("default"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ours := func(k string) bool { return strings.HasPrefix(k, "live-") }
	waitFor(t, 120*time.Second, "every expected finding in ClickHouse", func() bool {
		got := findings(t, db)
		for k := range want {
			if got[k] == 0 {
				return false
			}
		}
		return true
	})
	// Both inputs have delivered everything once the file input has read the whole log and the
	// webhook has published as many events of ours as the log holds.
	fileEvents := countIDs(t, auditLog, ours)
	waitFor(t, 60*time.Second, "both inputs to deliver every event", func() bool {
		m := scrape(t, metricsAddr)
		return m[`auditlens_ingest_events_published_total{input="file"}`] >= float64(lines(t, auditLog)) &&
			m[`auditlens_ingest_events_published_total{input="webhook"}`] >= float64(fileEvents)
	})
	m := scrape(t, metricsAddr)
	t.Logf("ingest published %v events from the file and %v from the webhook; %d of ours in the log",
		m[`auditlens_ingest_events_published_total{input="file"}`], m[`auditlens_ingest_events_published_total{input="webhook"}`], fileEvents)
	// Let classify and report settle: no new finding rows for two seconds.
	var last uint64
	stable := 0
	waitFor(t, 60*time.Second, "the findings table to stop growing", func() bool {
		var n uint64
		if err := db.QueryRow("SELECT count() FROM auditlens.findings").Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n == last {
			stable++
		} else {
			stable, last = 0, n
		}
		return stable >= 20
	})

	got := findings(t, db)
	var missing, extra, twice []string
	for k := range want {
		if got[k] == 0 {
			missing = append(missing, k)
		}
	}
	for k, n := range got {
		if !want[k] {
			extra = append(extra, k)
		}
		if n != 1 {
			twice = append(twice, fmt.Sprintf("%s x%d", k, n))
		}
	}
	sort.Strings(missing)
	sort.Strings(extra)
	if len(missing)+len(extra)+len(twice) > 0 {
		t.Fatalf("findings differ from the expected set:\n missing %q\n extra %q\n counted more than once %q", missing, extra, twice)
	}
	t.Logf("%d findings, exactly as expected: %s", len(got), strings.Join(slices.Sorted(maps.Keys(got)), ", "))

	// classify scan on the log the apiserver wrote finds the same for our requests.
	scanned := map[string]bool{}
	out, _ := exec.Command(bins["classify"], "scan", "--format", "json", auditLog).Output()
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		var f struct {
			AuditID string `json:"audit_id"`
			RuleID  string `json:"rule_id"`
		}
		if json.Unmarshal([]byte(line), &f) == nil && f.AuditID != "" {
			scanned[f.AuditID+" "+f.RuleID] = true
		}
	}
	if !maps.Equal(scanned, want) {
		t.Errorf("classify scan of the apiserver's log: %v, want %v", slices.Sorted(maps.Keys(scanned)), slices.Sorted(maps.Keys(want)))
	}
}

// deprecatedAPI is a deprecated API version that v1.37 still serves when asked to (deprecated in
// 1.36, removed in 1.39: the apiserver annotates its events with k8s.io/removed-release, so
// classify reports removed-api with removed_in 1.39).
var deprecatedAPI = struct {
	runtimeConfig, path string
	rule                string
}{"resource.k8s.io/v1beta2", "/apis/resource.k8s.io/v1beta2/deviceclasses", "removed-api"}

// drive sends the requests, each tagged with its own Audit-ID, and returns the findings they
// must produce as "audit_id rule_id".
func drive(t *testing.T, s *kubeapiserver.Server) map[string]bool {
	ctx := context.Background()
	want := map[string]bool{}
	expect := func(id string, rules ...string) {
		for _, r := range rules {
			want[id+" "+r] = true
		}
	}
	client := func(id string) *kubernetes.Clientset {
		cfg := s.Config(rest.NoWarnings{})
		cfg.UserAgent = "auditlens-live-test/1.0"
		cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
			return roundTripper(func(r *http.Request) (*http.Response, error) {
				r = r.Clone(r.Context())
				r.Header.Set("Audit-ID", id)
				return rt.RoundTrip(r)
			})
		}
		return kubernetes.NewForConfigOrDie(cfg)
	}
	must := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}

	setup := client("setup")
	for _, ns := range []*corev1.Namespace{
		{ObjectMeta: metav1.ObjectMeta{Name: "workloads"}},
		{ObjectMeta: metav1.ObjectMeta{Name: "psa-audited", Labels: map[string]string{"pod-security.kubernetes.io/audit": "restricted"}}},
	} {
		_, err := setup.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{})
		must("create namespace", err)
		// No controller manager creates the default service account, which pods are admitted with.
		_, err = setup.CoreV1().ServiceAccounts(ns.Name).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{})
		must("create default service account", err)
	}

	// A removed API version: 404, and no annotation from the apiserver.
	res := client("live-removed-api").RESTClient().Get().AbsPath("/apis/extensions/v1beta1/namespaces/workloads/deployments").Do(ctx)
	var code int
	res.StatusCode(&code)
	if code != http.StatusNotFound {
		t.Fatalf("extensions/v1beta1: status %d, want 404", code)
	}
	expect("live-removed-api", "removed-api")

	// A deprecated version the server still serves.
	res = client("live-deprecated-api").RESTClient().Get().AbsPath(deprecatedAPI.path).Do(ctx)
	res.StatusCode(&code)
	if code != http.StatusOK {
		t.Fatalf("%s: status %d: %v", deprecatedAPI.path, code, res.Error())
	}
	expect("live-deprecated-api", deprecatedAPI.rule)

	// A pod and a Deployment's template with the alpha seccomp and the AppArmor annotations.
	annotations := map[string]string{
		"seccomp.security.alpha.kubernetes.io/pod":           "runtime/default",
		"container.apparmor.security.beta.kubernetes.io/app": "runtime/default",
	}
	podSpec := corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "registry.example/app:1"}}}
	_, err := client("live-pod-annotations").CoreV1().Pods("workloads").Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "annotated", Annotations: annotations}, Spec: podSpec}, metav1.CreateOptions{})
	must("create pod", err)
	expect("live-pod-annotations", "seccomp-alpha-annotation", "apparmor-annotation")
	labels := map[string]string{"app": "annotated"}
	_, err = client("live-deployment-annotations").AppsV1().Deployments("workloads").Create(ctx, &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "annotated"},
		Spec: appsv1.DeploymentSpec{Selector: &metav1.LabelSelector{MatchLabels: labels}, Template: corev1.PodTemplateSpec{
			ObjectMeta: metav1.ObjectMeta{Labels: labels, Annotations: annotations}, Spec: podSpec}},
	}, metav1.CreateOptions{})
	must("create deployment", err)
	expect("live-deployment-annotations", "seccomp-alpha-annotation", "apparmor-annotation")

	// A CSR with an ECDSA key asking for key encipherment (an RSA-only usage).
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	must("ecdsa key", err)
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{Subject: pkix.Name{CommonName: "live-client"}}, key)
	must("csr", err)
	_, err = client("live-csr").CertificatesV1().CertificateSigningRequests().Create(ctx, &certv1.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{Name: "live-ecdsa"},
		Spec: certv1.CertificateSigningRequestSpec{
			Request:    pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}),
			SignerName: certv1.KubeAPIServerClientSignerName,
			Usages:     []certv1.KeyUsage{certv1.UsageDigitalSignature, certv1.UsageKeyEncipherment, certv1.UsageClientAuth},
		}}, metav1.CreateOptions{})
	must("create CSR", err)
	expect("live-csr", "csr-key-encipherment-non-rsa")

	// A node with the beta OS/arch labels and the old master role label.
	_, err = client("live-node").CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "live-node",
		Labels: map[string]string{"beta.kubernetes.io/os": "linux", "beta.kubernetes.io/arch": "amd64", "node-role.kubernetes.io/master": ""}}},
		metav1.CreateOptions{})
	must("create node", err)
	expect("live-node", "beta-node-label", "node-role-master-label")

	// A legacy (secret-based) service-account token, used once.
	sa, err := setup.CoreV1().ServiceAccounts("workloads").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "legacy"}}, metav1.CreateOptions{})
	must("create service account", err)
	legacy := legacyToken(t, s.ServiceAccountKey, "workloads", "legacy", string(sa.UID), "legacy-token")
	_, err = setup.CoreV1().Secrets("workloads").Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "legacy-token", Annotations: map[string]string{corev1.ServiceAccountNameKey: "legacy", corev1.ServiceAccountUIDKey: string(sa.UID)}},
		Type:       corev1.SecretTypeServiceAccountToken, Data: map[string][]byte{"token": []byte(legacy)}}, metav1.CreateOptions{})
	must("create token secret", err)
	legacyCfg := &rest.Config{Host: s.URL, BearerToken: legacy, TLSClientConfig: rest.TLSClientConfig{Insecure: true}, WarningHandler: rest.NoWarnings{},
		UserAgent: "auditlens-live-test/1.0",
		WrapTransport: func(rt http.RoundTripper) http.RoundTripper {
			return roundTripper(func(r *http.Request) (*http.Response, error) {
				r = r.Clone(r.Context())
				r.Header.Set("Audit-ID", "live-legacy-token")
				return rt.RoundTrip(r)
			})
		}}
	_, err = kubernetes.NewForConfigOrDie(legacyCfg).CoreV1().ConfigMaps("workloads").List(ctx, metav1.ListOptions{})
	if err == nil || !strings.Contains(err.Error(), "forbidden") {
		t.Fatalf("the legacy token should authenticate and then be forbidden (no RBAC): %v", err)
	}
	expect("live-legacy-token", "legacy-sa-token")

	// A pod that violates "restricted" in a namespace that audits it.
	_, err = client("live-pod-security").CoreV1().Pods("psa-audited").Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "unrestricted"}, Spec: podSpec}, metav1.CreateOptions{})
	must("create audited pod", err)
	expect("live-pod-security", "pod-security-violation")

	// Requests that must produce nothing: a current API, read and written.
	_, err = client("live-clean").CoreV1().ConfigMaps("workloads").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "clean"}}, metav1.CreateOptions{})
	must("create configmap", err)
	return want
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// legacyToken signs a token as the token controller of old clusters did (issuer
// kubernetes/serviceaccount, the secret's name in the claims).
func legacyToken(t *testing.T, key *rsa.PrivateKey, ns, sa, uid, secret string) string {
	enc := func(v any) string {
		b, _ := json.Marshal(v)
		return base64.RawURLEncoding.EncodeToString(b)
	}
	signing := enc(map[string]string{"alg": "RS256", "typ": "JWT"}) + "." + enc(map[string]string{
		"iss":                                    "kubernetes/serviceaccount",
		"sub":                                    "system:serviceaccount:" + ns + ":" + sa,
		"kubernetes.io/serviceaccount/namespace": ns,
		"kubernetes.io/serviceaccount/secret.name":          secret,
		"kubernetes.io/serviceaccount/service-account.name": sa,
		"kubernetes.io/serviceaccount/service-account.uid":  uid,
	})
	sum := sha256.Sum256([]byte(signing))
	sig, err := rsa.SignPKCS1v15(rand.Reader, key, crypto.SHA256, sum[:])
	if err != nil {
		t.Fatal(err)
	}
	return signing + "." + base64.RawURLEncoding.EncodeToString(sig)
}

// findings counts the stored rows of each of our (audit_id, rule_id), merged as the report
// counts them (FINAL: the table's identity).
func findings(t *testing.T, db *sql.DB) map[string]int {
	rows, err := db.Query("SELECT audit_id, rule_id, count() FROM auditlens.findings FINAL WHERE cluster = 'live' GROUP BY audit_id, rule_id")
	if err != nil {
		return nil // not migrated yet
	}
	defer rows.Close()
	got := map[string]int{}
	for rows.Next() {
		var a, r string
		var n uint64
		if err := rows.Scan(&a, &r, &n); err != nil {
			t.Fatal(err)
		}
		got[a+" "+r] = int(n)
	}
	return got
}

func buildServices(t *testing.T, dir string) map[string]string {
	bins := map[string]string{}
	for _, name := range []string{"ingest", "classify", "report"} {
		out := filepath.Join(dir, "bin", name)
		cmd := exec.Command("go", "build", "-o", out, "./cmd/"+name)
		cmd.Dir = filepath.Join("..", "..", "services", name)
		cmd.Env = append(os.Environ(), "GOWORK=off")
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("build %s: %v\n%s", name, err, b)
		}
		bins[name] = out
	}
	return bins
}

func run(t *testing.T, dir string, bins map[string]string, name string, args ...string) {
	logFile, err := os.Create(filepath.Join(dir, name+".log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bins[name], args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		logFile.Close()
		if t.Failed() {
			b, _ := os.ReadFile(logFile.Name())
			lines := strings.Split(strings.TrimSpace(string(b)), "\n")
			t.Logf("last lines of %s:\n%s", name, strings.Join(lines[max(0, len(lines)-15):], "\n"))
		}
	})
}

func writeTLS(t *testing.T, dir string) (caFile, certFile, keyFile string) {
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "auditlens test CA"}, NotBefore: time.Now().Add(-time.Hour),
		NotAfter: time.Now().Add(24 * time.Hour), IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "auditlens ingest"}, NotBefore: time.Now().Add(-time.Hour),
		NotAfter: time.Now().Add(24 * time.Hour), IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, DNSNames: []string{"localhost"},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, _ := x509.MarshalECPrivateKey(key)
	caFile, certFile, keyFile = filepath.Join(dir, "ca.crt"), filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	for f, b := range map[string][]byte{
		caFile:   pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}),
		certFile: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		keyFile:  pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}),
	} {
		if err := os.WriteFile(f, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return caFile, certFile, keyFile
}

// writeWebhookConfig fills in deploy/webhook-kubeconfig.yaml, the file a user gives the apiserver.
func writeWebhookConfig(t *testing.T, dir, server, caFile, token string) string {
	b, err := os.ReadFile("../webhook-kubeconfig.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var kc map[string]any
	if err := yaml.Unmarshal(b, &kc); err != nil {
		t.Fatal(err)
	}
	cluster := kc["clusters"].([]any)[0].(map[string]any)["cluster"].(map[string]any)
	cluster["server"], cluster["certificate-authority"] = server, caFile
	user := kc["users"].([]any)[0].(map[string]any)["user"].(map[string]any)
	if _, ok := user["token"]; !ok {
		t.Fatal("deploy/webhook-kubeconfig.yaml has no token field")
	}
	user["token"] = token
	out, err := yaml.Marshal(kc)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "webhook-kubeconfig.yaml")
	if err := os.WriteFile(path, out, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

var metricLine = regexp.MustCompile(`^(auditlens_ingest_events_published_total\{input="[a-z]+"\}) ([0-9.e+]+)$`)

func scrape(t *testing.T, addr string) map[string]float64 {
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	m := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if g := metricLine.FindStringSubmatch(sc.Text()); g != nil {
			v, _ := strconv.ParseFloat(g[2], 64)
			m[g[1]] = v
		}
	}
	return m
}

func lines(t *testing.T, path string) int {
	b, _ := os.ReadFile(path)
	return strings.Count(string(b), "\n")
}

// countIDs counts the events in the log whose auditID keep selects.
func countIDs(t *testing.T, path string, keep func(string) bool) int {
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var ev struct {
			AuditID string `json:"auditID"`
		}
		if json.Unmarshal([]byte(line), &ev) == nil && keep(ev.AuditID) {
			n++
		}
	}
	return n
}

func freeAddr(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func dial(addr string) bool {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err == nil {
		c.Close()
	}
	return err == nil
}

func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
