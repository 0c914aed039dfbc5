package kubeapiserver

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"

	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"k8s.io/client-go/rest"

	"github.com/auditlens/auditlens/lib/enginetest"
)

// AdminToken is the bearer token of the user "admin" (group system:masters).
const AdminToken = "auditlens-test-admin-token"

// Options adds to the flags every server gets.
type Options struct {
	// AuditPolicy, AuditLog and AuditWebhookConfig become --audit-policy-file, --audit-log-path
	// (JSON, blocking) and --audit-webhook-config-file (batch mode, flushed every second).
	AuditPolicy, AuditLog, AuditWebhookConfig string
	// Tokens are more lines of the static token file: token,user,uid,"group1,group2".
	Tokens []string
	Args   []string
}

// Server is a running kube-apiserver.
type Server struct {
	URL string
	// ServiceAccountKey signs service-account tokens (--service-account-signing-key-file).
	ServiceAccountKey *rsa.PrivateKey
	Dir               string
}

// Config returns a client configuration for the server as admin; warnings go to warn (nil: the
// client's default, logging them).
func (s *Server) Config(warn rest.WarningHandler) *rest.Config {
	return &rest.Config{Host: s.URL, BearerToken: AdminToken, TLSClientConfig: rest.TLSClientConfig{Insecure: true},
		WarningHandler: warn, QPS: 200, Burst: 400}
}

// Start starts etcd and a kube-apiserver in a temporary directory for the life of t. A missing
// etcd or apiserver skips t locally and fails it under CI=true.
func Start(t testing.TB, o Options) *Server {
	t.Helper()
	bin, err := Binary()
	if err != nil {
		enginetest.Unavailable(t, "kube-apiserver", err)
	}
	etcdBin, err := exec.LookPath("etcd")
	if err != nil {
		enginetest.Unavailable(t, "etcd (apt-get install etcd-server)", err)
	}
	dir := t.TempDir()
	etcdClient, etcdPeer := freePort(t), freePort(t)
	etcdURL := "http://127.0.0.1:" + strconv.Itoa(etcdClient)
	start(t, dir, "etcd", etcdBin, "--data-dir", filepath.Join(dir, "etcd"), "--name", "test",
		"--listen-client-urls", etcdURL, "--advertise-client-urls", etcdURL,
		"--listen-peer-urls", "http://127.0.0.1:"+strconv.Itoa(etcdPeer),
		"--initial-advertise-peer-urls", "http://127.0.0.1:"+strconv.Itoa(etcdPeer),
		"--initial-cluster", "test=http://127.0.0.1:"+strconv.Itoa(etcdPeer), "--log-level", "warn")

	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	keyFile := filepath.Join(dir, "sa.key")
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}), 0o600); err != nil {
		t.Fatal(err)
	}
	tokens := append([]string{AdminToken + `,admin,admin-uid,"system:masters"`}, o.Tokens...)
	tokenFile := filepath.Join(dir, "tokens.csv")
	if err := os.WriteFile(tokenFile, []byte(strings.Join(tokens, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	port := freePort(t)
	args := []string{
		"--etcd-servers", etcdURL, "--bind-address", "127.0.0.1", "--secure-port", strconv.Itoa(port),
		"--cert-dir", filepath.Join(dir, "certs"), "--token-auth-file", tokenFile,
		"--authorization-mode", "Node,RBAC", "--service-account-issuer", "https://kubernetes.default.svc",
		"--service-account-key-file", keyFile, "--service-account-signing-key-file", keyFile,
		"--service-cluster-ip-range", "10.96.0.0/16", "--enable-priority-and-fairness=false",
	}
	if o.AuditPolicy != "" {
		args = append(args, "--audit-policy-file", o.AuditPolicy)
	}
	if o.AuditLog != "" {
		args = append(args, "--audit-log-path", o.AuditLog, "--audit-log-format", "json", "--audit-log-mode", "blocking")
	}
	if o.AuditWebhookConfig != "" {
		args = append(args, "--audit-webhook-config-file", o.AuditWebhookConfig, "--audit-webhook-mode", "batch",
			"--audit-webhook-batch-max-wait", "1s", "--audit-webhook-initial-backoff", "1s")
	}
	args = append(args, o.Args...)
	start(t, dir, "kube-apiserver", bin, args...)
	s := &Server{URL: "https://127.0.0.1:" + strconv.Itoa(port), ServiceAccountKey: key, Dir: dir}
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	deadline := time.Now().Add(90 * time.Second)
	for {
		req, _ := http.NewRequestWithContext(context.Background(), http.MethodGet, s.URL+"/readyz", nil)
		req.Header.Set("Authorization", "Bearer "+AdminToken)
		resp, err := client.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return s
			}
		}
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(filepath.Join(dir, "kube-apiserver.log"))
			t.Fatalf("kube-apiserver not ready after 90s (last: %v)\n%s", err, tail(b, 30))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func start(t testing.TB, dir, name, bin string, args ...string) {
	t.Helper()
	logFile, err := os.Create(filepath.Join(dir, name+".log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		enginetest.Unavailable(t, name, err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		logFile.Close()
		if t.Failed() {
			b, _ := os.ReadFile(logFile.Name())
			t.Logf("last lines of %s:\n%s", name, tail(b, 20))
		}
	})
}

func tail(b []byte, n int) string {
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

func freePort(t testing.TB) int {
	p, err := enginetest.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	return p
}
