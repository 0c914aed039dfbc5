// Package deploy checks the shipped Kubernetes manifests: every document decodes strictly into
// its Kubernetes type (an unknown or misspelt field is an error), and the wiring between them holds.
package deploy

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

func documents(t *testing.T, path string) [][]byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out [][]byte
	for _, d := range bytes.Split(b, []byte("\n---\n")) {
		if len(bytes.TrimSpace(d)) > 0 {
			out = append(out, d)
		}
	}
	return out
}

func TestKubernetesManifestsDecodeStrictly(t *testing.T) {
	var k struct {
		Resources []string `json:"resources"`
	}
	kb, err := os.ReadFile("kubernetes/kustomization.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(kb, &k); err != nil {
		t.Fatal(err)
	}
	files, _ := filepath.Glob("kubernetes/*.yaml")
	if len(k.Resources) != len(files)-1 {
		t.Fatalf("kustomization lists %d resources, directory has %d manifests", len(k.Resources), len(files)-1)
	}
	kinds := map[string]int{}
	for _, f := range k.Resources {
		for _, doc := range documents(t, filepath.Join("kubernetes", f)) {
			var u unstructured.Unstructured
			if err := yaml.Unmarshal(doc, &u.Object); err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			var obj any
			switch u.GetKind() {
			case "Deployment":
				obj = &appsv1.Deployment{}
			case "DaemonSet":
				obj = &appsv1.DaemonSet{}
			case "CronJob":
				obj = &batchv1.CronJob{}
			case "Service":
				obj = &corev1.Service{}
			case "ConfigMap":
				obj = &corev1.ConfigMap{}
			case "Secret":
				obj = &corev1.Secret{}
			case "Namespace":
				obj = &corev1.Namespace{}
			default:
				t.Fatalf("%s: unexpected kind %q", f, u.GetKind())
			}
			if err := yaml.UnmarshalStrict(doc, obj); err != nil {
				t.Errorf("%s %s/%s: %v", f, u.GetKind(), u.GetName(), err)
			}
			kinds[u.GetKind()]++
			checkPodSpec(t, f, obj)
		}
	}
	if kinds["Deployment"] != 3 || kinds["DaemonSet"] != 1 || kinds["CronJob"] != 1 {
		t.Fatalf("kinds %v", kinds)
	}
}

// checkPodSpec: every container takes the shared settings and exposes what its probes use.
func checkPodSpec(t *testing.T, file string, obj any) {
	var spec *corev1.PodSpec
	switch o := obj.(type) {
	case *appsv1.Deployment:
		spec = &o.Spec.Template.Spec
	case *appsv1.DaemonSet:
		spec = &o.Spec.Template.Spec
	case *batchv1.CronJob:
		spec = &o.Spec.JobTemplate.Spec.Template.Spec
	default:
		return
	}
	for _, c := range spec.Containers {
		if len(c.EnvFrom) == 0 || c.EnvFrom[0].ConfigMapRef == nil || c.EnvFrom[0].ConfigMapRef.Name != "auditlens" {
			t.Errorf("%s: container %s does not read the auditlens ConfigMap", file, c.Name)
		}
		if !strings.HasPrefix(c.Image, "auditlens/") {
			t.Errorf("%s: container %s image %q", file, c.Name, c.Image)
		}
		for _, p := range []*corev1.Probe{c.ReadinessProbe, c.LivenessProbe} {
			if p == nil || p.HTTPGet == nil {
				continue
			}
			found := false
			for _, port := range c.Ports {
				found = found || port.Name == p.HTTPGet.Port.String()
			}
			if !found {
				t.Errorf("%s: probe port %s not declared", file, p.HTTPGet.Port.String())
			}
		}
	}
}
