package node

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The users of the static token file: the components authenticate with bearer tokens, the
// apiserver with a client certificate at the kubelet.
var components = []struct{ name, user, groups string }{
	{"admin", "admin", "system:masters"},
	{"kube-controller-manager", "system:kube-controller-manager", ""},
	{"kube-scheduler", "system:kube-scheduler", ""},
	{"kubelet", "system:node:" + NodeName, "system:nodes"},
	{"kube-proxy", "system:kube-proxy", ""},
	{"dns", "system:auditlens-node-dns", ""},
}

func apiURL() string { return "https://" + net.JoinHostPort(NodeIP, strconv.Itoa(APIPort)) }

func (n *Node) kubeconfigFile(name string) string {
	if name == "admin" {
		return n.Kubeconfig()
	}
	return filepath.Join(n.cfg.Root, "kubeconfig-"+name)
}

// writeKubeconfigs writes the token file and one kubeconfig per component.
func (n *Node) writeKubeconfigs() (tokenFile string, err error) {
	ca, err := os.ReadFile(n.pki.CAFile())
	if err != nil {
		return "", err
	}
	var lines []string
	for _, c := range components {
		tok, err := n.pki.token(c.name)
		if err != nil {
			return "", err
		}
		lines = append(lines, fmt.Sprintf("%s,%s,%s,%q", tok, c.user, c.user, c.groups))
		kc := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
  - name: auditlens-node
    cluster:
      server: %s
      certificate-authority-data: %s
users:
  - name: %s
    user:
      token: %s
contexts:
  - name: auditlens-node
    context: {cluster: auditlens-node, user: %s}
current-context: auditlens-node
`, apiURL(), b64(ca), c.user, tok, c.user)
		if err := os.WriteFile(n.kubeconfigFile(c.name), []byte(kc), 0o600); err != nil {
			return "", err
		}
	}
	tokenFile = filepath.Join(n.cfg.Root, "pki", "tokens.csv")
	return tokenFile, os.WriteFile(tokenFile, []byte(strings.Join(lines, "\n")+"\n"), 0o600)
}

func (n *Node) upControlPlane(ctx context.Context) error {
	tokenFile, err := n.writeKubeconfigs()
	if err != nil {
		return err
	}
	ips := []net.IP{net.ParseIP(NodeIP), net.ParseIP("10.96.0.1"), net.ParseIP("127.0.0.1")}
	dns := []string{"kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local", "localhost"}
	servingCert, servingKey, err := n.pki.pair("apiserver", "kube-apiserver", nil, ips, dns, false)
	if err != nil {
		return err
	}
	kubeletClientCert, kubeletClientKey, err := n.pki.pair("apiserver-kubelet-client", "kube-apiserver-kubelet-client", []string{"system:masters"}, nil, nil, true)
	if err != nil {
		return err
	}
	saKey, err := n.pki.serviceAccountKey()
	if err != nil {
		return err
	}
	webhookConfig, err := n.writeWebhookKubeconfig()
	if err != nil {
		return err
	}
	if err := n.startDetached("kube-apiserver", filepath.Join(n.bin, "kube-apiserver"),
		"--etcd-servers", etcdClientURL,
		"--bind-address", NodeIP, "--advertise-address", NodeIP, "--secure-port", strconv.Itoa(APIPort),
		"--tls-cert-file", servingCert, "--tls-private-key-file", servingKey,
		"--client-ca-file", n.pki.CAFile(), "--token-auth-file", tokenFile,
		"--authorization-mode", "Node,RBAC",
		"--service-account-issuer", "https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file", saKey, "--service-account-signing-key-file", saKey,
		"--service-cluster-ip-range", ServiceCIDR,
		"--kubelet-client-certificate", kubeletClientCert, "--kubelet-client-key", kubeletClientKey,
		"--kubelet-preferred-address-types", "InternalIP",
		"--audit-policy-file", filepath.Join(n.cfg.Repo, "deploy", "audit-policy.yaml"),
		"--audit-log-path", filepath.Join(n.AuditDir(), "audit.log"), "--audit-log-format", "json",
		"--audit-log-maxsize", "100", "--audit-log-maxbackup", "3",
		"--audit-webhook-config-file", webhookConfig, "--audit-webhook-mode", "batch",
		"--audit-webhook-batch-max-wait", "1s", "--audit-webhook-initial-backoff", "1s",
	); err != nil {
		return err
	}
	tok, err := n.pki.token("admin")
	if err != nil {
		return err
	}
	if err := waitHTTP(ctx, apiURL()+"/readyz", map[string]string{"Authorization": "Bearer " + tok}, 120*time.Second); err != nil {
		return fmt.Errorf("kube-apiserver: %w", err)
	}
	if err := n.bindDNS(ctx); err != nil {
		return err
	}
	if err := n.startDetached("kube-controller-manager", filepath.Join(n.bin, "kube-controller-manager"),
		"--kubeconfig", n.kubeconfigFile("kube-controller-manager"),
		"--authentication-kubeconfig", n.kubeconfigFile("kube-controller-manager"),
		"--authorization-kubeconfig", n.kubeconfigFile("kube-controller-manager"),
		"--bind-address", "127.0.0.1", "--leader-elect=false",
		"--service-account-private-key-file", saKey, "--root-ca-file", n.pki.CAFile(),
		"--use-service-account-credentials", "--service-cluster-ip-range", ServiceCIDR,
	); err != nil {
		return err
	}
	if err := n.startDetached("kube-scheduler", filepath.Join(n.bin, "kube-scheduler"),
		"--kubeconfig", n.kubeconfigFile("kube-scheduler"),
		"--authentication-kubeconfig", n.kubeconfigFile("kube-scheduler"),
		"--authorization-kubeconfig", n.kubeconfigFile("kube-scheduler"),
		"--bind-address", "127.0.0.1", "--leader-elect=false",
	); err != nil {
		return err
	}
	if err := n.startDetached("kube-proxy", filepath.Join(n.bin, "kube-proxy"),
		"--kubeconfig", n.kubeconfigFile("kube-proxy"), "--hostname-override", NodeName,
		"--proxy-mode", "iptables", "--cluster-cidr", PodCIDR, "--conntrack-max-per-core", "0",
		"--metrics-bind-address", "127.0.0.1:10249", "--healthz-bind-address", "127.0.0.1:10256",
	); err != nil {
		return err
	}
	// The cluster's DNS: the resolver of cmd/node on the node's address (docs/node.md).
	return n.startDetached("dns", n.cfg.Self, "dns", "--addr", net.JoinHostPort(NodeIP, strconv.Itoa(DNSPort)),
		"--kubeconfig", n.kubeconfigFile("dns"))
}

// cleanupProxyRules removes kube-proxy's iptables chains.
func (n *Node) cleanupProxyRules() error {
	bin := filepath.Join(n.bin, "kube-proxy")
	if n.bin == "" || !exists(bin) {
		return nil // never built, so never ran
	}
	return run(bin, "--cleanup", "--proxy-mode", "iptables")
}

func (n *Node) upKubelet(ctx context.Context) error {
	dir := filepath.Join(n.cfg.Root, "kubelet")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	// Pods get the cluster's resolver only: no search domains or servers of the host.
	resolv := filepath.Join(dir, "resolv.conf")
	if err := os.WriteFile(resolv, nil, 0o644); err != nil {
		return err
	}
	// cgroup v1 (hybrid) here: failCgroupV1 false and the cgroupfs driver (as containerd's runc).
	config := fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
failCgroupV1: false
cgroupDriver: cgroupfs
failSwapOn: false
address: %[1]s
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: %[2]s}
authorization: {mode: Webhook}
clusterDNS: [%[1]s]
clusterDomain: cluster.local
resolvConf: %[3]s
containerRuntimeEndpoint: unix://%[4]s
podCIDR: %[5]s
maxPods: 40
serializeImagePulls: false
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {memory.available: "100Mi", nodefs.available: "1%%", imagefs.available: "1%%", nodefs.inodesFree: "1%%"}
`, NodeIP, n.pki.CAFile(), resolv, n.containerdSocket(), PodCIDR)
	if err := os.WriteFile(filepath.Join(dir, "config.yaml"), []byte(config), 0o644); err != nil {
		return err
	}
	if err := n.startDetached("kubelet", filepath.Join(n.bin, "kubelet"),
		"--config", filepath.Join(dir, "config.yaml"), "--kubeconfig", n.kubeconfigFile("kubelet"),
		"--root-dir", filepath.Join(n.cfg.Run, "kubelet"), "--cert-dir", filepath.Join(n.cfg.Run, "kubelet-pki"),
		"--hostname-override", NodeName, "--node-ip", NodeIP,
	); err != nil {
		return err
	}
	return n.waitNodeReady(ctx)
}

func waitHTTP(ctx context.Context, url string, headers map[string]string, timeout time.Duration) error {
	client := &http.Client{Timeout: 3 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // readiness of our own local server
	return poll(ctx, timeout, func() error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		for k, v := range headers {
			req.Header.Set(k, v)
		}
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("%s: %s", url, resp.Status)
		}
		return nil
	})
}

// bindDNS lets the resolver read Services (ClusterRole view).
func (n *Node) bindDNS(ctx context.Context) error {
	c, err := n.client()
	if err != nil {
		return err
	}
	b := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "auditlens-node-dns"},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "view"},
		Subjects:   []rbacv1.Subject{{APIGroup: "rbac.authorization.k8s.io", Kind: "User", Name: "system:auditlens-node-dns"}},
	}
	if _, err := c.RbacV1().ClusterRoleBindings().Create(ctx, b, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	return nil
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
