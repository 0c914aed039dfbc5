package node

import (
	"context"
	"encoding/base64"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

func b64(b []byte) string { return base64.StdEncoding.EncodeToString(b) }

// Overlay is deploy/nodetest's kustomization, relative to the repository.
const Overlay = "deploy/nodetest/overlay"

// writeWebhookKubeconfig is deploy/webhook-kubeconfig.yaml filled in for the node: the
// ingest-webhook Service's fixed ClusterIP, the node's CA, the token of the auditlens-webhook
// Secret.
func (n *Node) writeWebhookKubeconfig() (string, error) {
	ca, err := os.ReadFile(n.pki.CAFile())
	if err != nil {
		return "", err
	}
	tok, err := n.pki.token("webhook")
	if err != nil {
		return "", err
	}
	kc := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
  - name: auditlens
    cluster:
      server: https://%s:8443/audit
      certificate-authority-data: %s
users:
  - name: kube-apiserver
    user:
      token: %s
contexts:
  - name: auditlens
    context: {cluster: auditlens, user: kube-apiserver}
current-context: auditlens
`, WebhookIP, b64(ca), tok)
	path := filepath.Join(n.cfg.Root, "pki", "webhook-kubeconfig.yaml")
	return path, os.WriteFile(path, []byte(kc), 0o600)
}

func (n *Node) client() (*kubernetes.Clientset, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", n.Kubeconfig())
	if err != nil {
		return nil, err
	}
	return kubernetes.NewForConfig(cfg)
}

// waitNodeReady waits for the node to register and be Ready, then labels it control-plane (a
// kubelet may not set node-role labels on itself).
func (n *Node) waitNodeReady(ctx context.Context) error {
	c, err := n.client()
	if err != nil {
		return err
	}
	err = poll(ctx, 180*time.Second, func() error {
		node, err := c.CoreV1().Nodes().Get(ctx, NodeName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, cond := range node.Status.Conditions {
			if cond.Type == corev1.NodeReady {
				if cond.Status == corev1.ConditionTrue {
					return nil
				}
				return fmt.Errorf("node %s: %s: %s", NodeName, cond.Reason, cond.Message)
			}
		}
		return fmt.Errorf("node %s: no Ready condition yet", NodeName)
	})
	if err != nil {
		return err
	}
	patch := []byte(`{"metadata":{"labels":{"node-role.kubernetes.io/control-plane":""}}}`)
	_, err = c.CoreV1().Nodes().Patch(ctx, NodeName, types.MergePatchType, patch, metav1.PatchOptions{})
	return err
}

// deploy applies deploy/nodetest's overlay, the webhook's Secrets, and waits for every pod.
func (n *Node) deploy(ctx context.Context) error {
	kubectl := filepath.Join(n.bin, "kubectl")
	if err := n.kubectl(kubectl, "apply", "--server-side", "--force-conflicts", "-k", filepath.Join(n.cfg.Repo, Overlay)); err != nil {
		return err
	}
	c, err := n.client()
	if err != nil {
		return err
	}
	cert, key, err := n.pki.pair("ingest-webhook", "ingest-webhook.auditlens.svc", nil,
		[]net.IP{net.ParseIP(WebhookIP)}, []string{"ingest-webhook.auditlens.svc", "ingest-webhook.auditlens.svc.cluster.local"}, false)
	if err != nil {
		return err
	}
	certPEM, err := os.ReadFile(cert)
	if err != nil {
		return err
	}
	keyPEM, err := os.ReadFile(key)
	if err != nil {
		return err
	}
	tok, err := n.pki.token("webhook")
	if err != nil {
		return err
	}
	for _, s := range []*corev1.Secret{
		{ObjectMeta: metav1.ObjectMeta{Name: "auditlens-webhook-tls", Namespace: "auditlens"}, Type: corev1.SecretTypeTLS,
			Data: map[string][]byte{"tls.crt": certPEM, "tls.key": keyPEM}},
		{ObjectMeta: metav1.ObjectMeta{Name: "auditlens-webhook", Namespace: "auditlens"},
			Data: map[string][]byte{"token": []byte(tok)}},
	} {
		if _, err := c.CoreV1().Secrets(s.Namespace).Create(ctx, s, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
	}
	return n.waitPodsReady(ctx, c, 300*time.Second)
}

func (n *Node) kubectl(kubectl string, args ...string) error {
	cmd := exec.Command(kubectl, append([]string{"--kubeconfig", n.Kubeconfig()}, args...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("kubectl %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	return nil
}

// waitPodsReady waits until every pod of the cluster is Ready (Succeeded pods, of Jobs, count).
func (n *Node) waitPodsReady(ctx context.Context, c *kubernetes.Clientset, timeout time.Duration) error {
	return poll(ctx, timeout, func() error {
		pods, err := c.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		if len(pods.Items) == 0 {
			return fmt.Errorf("no pods yet")
		}
		var notReady []string
		for _, p := range pods.Items {
			if p.Status.Phase == corev1.PodSucceeded {
				continue
			}
			ready := false
			for _, cond := range p.Status.Conditions {
				if cond.Type == corev1.PodReady && cond.Status == corev1.ConditionTrue {
					ready = true
				}
			}
			if !ready {
				notReady = append(notReady, p.Namespace+"/"+p.Name+" ("+string(p.Status.Phase)+")")
			}
		}
		if len(notReady) > 0 {
			return fmt.Errorf("pods not Ready: %s", strings.Join(notReady, ", "))
		}
		return nil
	})
}
