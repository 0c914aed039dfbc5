package kubetest

import (
	"context"
	"encoding/json"
	"os"
	"path"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"github.com/auditlens/auditlens/deploy/kubetest/kubeapiserver"
)

const guidesDir = "../../docs/platforms"

// guideBlock is the fenced block that follows "<!-- test:<kind> <platform> -->" in the
// platform's guide.
func guideBlock(t *testing.T, platform, kind string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(guidesDir, platform+".md"))
	if err != nil {
		t.Fatal(err)
	}
	re := regexp.MustCompile("(?s)<!-- test:" + regexp.QuoteMeta(kind) + " " + regexp.QuoteMeta(platform) + " -->\n```[a-z]*\n(.*?)```")
	m := re.FindSubmatch(b)
	if m == nil {
		t.Fatalf("%s.md has no block marked test:%s", platform, kind)
	}
	return m[1]
}

// guideFlags reads the apiserver flags a guide gives (name without "--" -> value) and, for
// Talos, the inline policy.
func guideFlags(t *testing.T, platform string) (map[string]string, map[string]any) {
	t.Helper()
	block := guideBlock(t, platform, "apiserver")
	flags := map[string]string{}
	keyValues := func(list []string) {
		for _, kv := range list {
			k, v, ok := strings.Cut(strings.TrimPrefix(kv, "--"), "=")
			if !ok {
				t.Fatalf("%s: %q is not name=value", platform, kv)
			}
			flags[k] = v
		}
	}
	switch platform {
	case "kubeadm":
		var c struct {
			APIVersion string `json:"apiVersion"`
			Kind       string `json:"kind"`
			APIServer  struct {
				ExtraArgs    []struct{ Name, Value string } `json:"extraArgs"`
				ExtraVolumes []struct {
					Name      string `json:"name"`
					HostPath  string `json:"hostPath"`
					MountPath string `json:"mountPath"`
					ReadOnly  bool   `json:"readOnly"`
					PathType  string `json:"pathType"`
				} `json:"extraVolumes"`
			} `json:"apiServer"`
		}
		if err := yaml.UnmarshalStrict(block, &c); err != nil {
			t.Fatalf("kubeadm ClusterConfiguration: %v", err)
		}
		if c.APIVersion != "kubeadm.k8s.io/v1beta4" || c.Kind != "ClusterConfiguration" {
			t.Fatalf("kubeadm: %s %s", c.APIVersion, c.Kind)
		}
		for _, a := range c.APIServer.ExtraArgs {
			flags[a.Name] = a.Value
		}
		var mounts []string
		for _, v := range c.APIServer.ExtraVolumes {
			if v.HostPath != v.MountPath {
				t.Errorf("kubeadm: volume %s mounts %s at %s: the flags name node paths", v.Name, v.HostPath, v.MountPath)
			}
			mounts = append(mounts, v.MountPath)
		}
		checkMounted(t, "kubeadm ClusterConfiguration", flags, mounts)

		// The static pod edit gives the same flags and mounts.
		var pod corev1.Pod
		if err := yaml.UnmarshalStrict(guideBlock(t, platform, "static-pod"), &pod); err != nil {
			t.Fatalf("kubeadm static pod: %v", err)
		}
		podFlags := map[string]string{}
		for _, a := range pod.Spec.Containers[0].Command {
			if k, v, ok := strings.Cut(strings.TrimPrefix(a, "--"), "="); ok && strings.HasPrefix(a, "--audit-") {
				podFlags[k] = v
			}
		}
		if !reflect.DeepEqual(podFlags, flags) {
			t.Errorf("kubeadm: the static pod's flags %v differ from the ClusterConfiguration's %v", podFlags, flags)
		}
		var podMounts []string
		for _, m := range pod.Spec.Containers[0].VolumeMounts {
			for _, v := range pod.Spec.Volumes {
				if v.Name == m.Name && v.HostPath != nil && v.HostPath.Path == m.MountPath {
					podMounts = append(podMounts, m.MountPath)
				}
			}
		}
		checkMounted(t, "kubeadm static pod", flags, podMounts)
		return flags, nil
	case "k3s", "rke2":
		var c struct {
			AuditPolicyFile string   `json:"audit-policy-file"`
			Args            []string `json:"kube-apiserver-arg"`
		}
		if err := yaml.UnmarshalStrict(block, &c); err != nil {
			t.Fatalf("%s config.yaml: %v", platform, err)
		}
		if c.AuditPolicyFile != "" {
			if platform != "rke2" {
				t.Fatalf("%s has no audit-policy-file option: give it as a kube-apiserver-arg", platform)
			}
			flags["audit-policy-file"] = c.AuditPolicyFile
		}
		keyValues(c.Args)
		return flags, nil
	case "talos":
		var c struct {
			Cluster struct {
				APIServer struct {
					AuditPolicy map[string]any    `json:"auditPolicy"`
					ExtraArgs   map[string]string `json:"extraArgs"`
				} `json:"apiServer"`
			} `json:"cluster"`
		}
		if err := yaml.UnmarshalStrict(block, &c); err != nil {
			t.Fatalf("talos patch: %v", err)
		}
		for k, v := range c.Cluster.APIServer.ExtraArgs {
			flags[k] = v
		}
		return flags, c.Cluster.APIServer.AuditPolicy
	}
	t.Fatalf("no reader for %s", platform)
	return nil, nil
}

// checkMounted: the policy file and the log's directory are inside the apiserver's mounts.
func checkMounted(t *testing.T, what string, flags map[string]string, mounts []string) {
	for _, f := range []string{flags["audit-policy-file"], path.Dir(flags["audit-log-path"])} {
		if !slices.ContainsFunc(mounts, func(m string) bool { return f == m || strings.HasPrefix(f, m+"/") }) {
			t.Errorf("%s: %s is in none of the mounts %v", what, f, mounts)
		}
	}
}

// guideValues are the chart values a guide gives, and the log file they make the DaemonSet read.
func guideValues(t *testing.T, platform string) (map[string]any, string) {
	t.Helper()
	vals := map[string]any{}
	if err := yaml.UnmarshalStrict(guideBlock(t, platform, "values"), &vals); err != nil {
		t.Fatal(err)
	}
	objs, _, err := renderChart(t, vals)
	if err != nil {
		t.Fatalf("%s: the guide's values do not render: %v", platform, err)
	}
	for _, o := range objs {
		if o.GetKind() != "DaemonSet" {
			continue
		}
		var ds struct {
			Spec struct {
				Template corev1.PodTemplateSpec `json:"template"`
			} `json:"spec"`
		}
		b, _ := yaml.Marshal(o.Object)
		if err := yaml.Unmarshal(b, &ds); err != nil {
			t.Fatal(err)
		}
		pod := ds.Spec.Template.Spec
		var log string
		for _, a := range pod.Containers[0].Args {
			if v, ok := strings.CutPrefix(a, "--audit-log="); ok {
				log = v
			}
		}
		if !slices.ContainsFunc(pod.Volumes, func(v corev1.Volume) bool { return v.HostPath != nil && v.HostPath.Path == path.Dir(log) }) {
			t.Errorf("%s: the DaemonSet reads %s but mounts no hostPath %s", platform, log, path.Dir(log))
		}
		for k, v := range pod.NodeSelector {
			if strings.Contains(k, "arch") {
				t.Errorf("%s: the DaemonSet pins %s=%s: the images are multi-arch", platform, k, v)
			}
		}
		return vals, log
	}
	t.Fatalf("%s: the guide's values install no DaemonSet", platform)
	return nil, ""
}

// TestPlatformGuides starts the real kube-apiserver with each guide's flags (paths moved under
// a temporary root) and the shipped deploy/audit-policy.yaml, and checks that it writes audit
// events to the file the chart's DaemonSet reads with that guide's values. OpenShift has audit
// profiles instead of flags: its block is checked, no apiserver is started.
func TestPlatformGuides(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(guidesDir, "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	var platforms []string
	for _, f := range files {
		if name := strings.TrimSuffix(filepath.Base(f), ".md"); name != "README" {
			platforms = append(platforms, name)
		}
	}
	sort.Strings(platforms)
	if want := []string{"k3s", "kubeadm", "openshift", "rke2", "talos"}; !reflect.DeepEqual(platforms, want) {
		t.Fatalf("guides %v, the test knows %v", platforms, want)
	}
	shipped, err := os.ReadFile("../audit-policy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range platforms {
		t.Run(p, func(t *testing.T) {
			vals, log := guideValues(t, p)
			if p == "openshift" {
				var c struct {
					APIVersion string `json:"apiVersion"`
					Kind       string `json:"kind"`
					Metadata   struct {
						Name string `json:"name"`
					} `json:"metadata"`
					Spec struct {
						Audit struct {
							Profile string `json:"profile"`
						} `json:"audit"`
					} `json:"spec"`
				}
				if err := yaml.UnmarshalStrict(guideBlock(t, p, "apiserver"), &c); err != nil {
					t.Fatal(err)
				}
				if c.APIVersion != "config.openshift.io/v1" || c.Kind != "APIServer" || c.Metadata.Name != "cluster" ||
					!slices.Contains([]string{"Default", "WriteRequestBodies", "AllRequestBodies"}, c.Spec.Audit.Profile) {
					t.Errorf("openshift: %+v is not the cluster's APIServer with a recording profile", c)
				}
				if log != "/var/log/kube-apiserver/audit.log" {
					t.Errorf("openshift: the DaemonSet reads %s, the kube-apiserver writes /var/log/kube-apiserver/audit.log", log)
				}
				// DNS: OpenShift's resolvers, in openshift-dns on 5353, for both namespaces.
				objs, _, err := renderChart(t, vals)
				if err != nil {
					t.Fatal(err)
				}
				n := 0
				for _, o := range objs {
					if o.GetKind() != "NetworkPolicy" || o.GetName() != "allow-dns" {
						continue
					}
					n++
					b, _ := json.Marshal(o.Object["spec"])
					if !strings.Contains(string(b), `"kubernetes.io/metadata.name":"openshift-dns"`) || !strings.Contains(string(b), `"port":5353`) ||
						!strings.Contains(string(b), `"dns.operator.openshift.io/daemonset-dns":"default"`) {
						t.Errorf("openshift: %s/allow-dns does not let DNS out to openshift-dns:5353: %s", o.GetNamespace(), b)
					}
				}
				if n != 2 {
					t.Errorf("openshift: %d allow-dns policies, want 2 (auditlens, auditlens-ingest)", n)
				}
				return
			}
			flags, inline := guideFlags(t, p)
			root := t.TempDir()
			if p == "talos" {
				// The inline policy is the shipped one; Talos writes it out and logs where the
				// guide's values read.
				var want map[string]any
				if err := yaml.Unmarshal(shipped, &want); err != nil {
					t.Fatal(err)
				}
				if !reflect.DeepEqual(inline, want) {
					t.Errorf("talos: the patch's auditPolicy is not deploy/audit-policy.yaml")
				}
				flags["audit-policy-file"] = "/audit-policy.yaml" // where Talos keeps it does not matter here
				flags["audit-log-path"] = log
			}
			if flags["audit-log-path"] != log {
				t.Fatalf("%s: the apiserver writes %s, the DaemonSet reads %s", p, flags["audit-log-path"], log)
			}
			if flags["audit-policy-file"] == "" {
				t.Fatalf("%s: no audit-policy-file", p)
			}
			var args []string
			for k, v := range flags {
				if strings.HasPrefix(v, "/") {
					v = filepath.Join(root, v)
					if err := os.MkdirAll(filepath.Dir(v), 0o700); err != nil {
						t.Fatal(err)
					}
				}
				args = append(args, "--"+k+"="+v)
			}
			if err := os.WriteFile(filepath.Join(root, flags["audit-policy-file"]), shipped, 0o600); err != nil {
				t.Fatal(err)
			}
			s := kubeapiserver.Start(t, kubeapiserver.Options{Args: args})
			cs := kubernetes.NewForConfigOrDie(s.Config(nil))
			probe := "guide-" + p
			if _, err := cs.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: probe}}, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			logFile := filepath.Join(root, log)
			deadline := time.Now().Add(30 * time.Second)
			for {
				b, _ := os.ReadFile(logFile)
				if found := slices.ContainsFunc(strings.Split(string(b), "\n"), func(line string) bool {
					ev := &unstructured.Unstructured{}
					if yaml.Unmarshal([]byte(line), &ev.Object) != nil {
						return false
					}
					verb, _, _ := unstructured.NestedString(ev.Object, "verb")
					name, _, _ := unstructured.NestedString(ev.Object, "objectRef", "name")
					return ev.GetKind() == "Event" && verb == "create" && name == probe
				}); found {
					t.Logf("%s: %s holds the create of namespace %s (%d bytes)", p, log, probe, len(b))
					return
				}
				if time.Now().After(deadline) {
					t.Fatalf("%s: no audit event of the create in %s after 30s (%d bytes)", p, logFile, len(b))
				}
				time.Sleep(200 * time.Millisecond)
			}
		})
	}
}
