package manifests

import (
	"encoding/base64"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// releaseManifest is what a chart rendered: a removed Ingress, a PodSecurityPolicy, and
// objects of served apiVersions.
const releaseManifest = `---
# Source: web/templates/ingress.yaml
apiVersion: extensions/v1beta1
kind: Ingress
metadata: {name: web, namespace: shop}
spec: {rules: [{host: shop.example}]}
---
# Source: web/templates/psp.yaml
apiVersion: policy/v1beta1
kind: PodSecurityPolicy
metadata: {name: web}
spec: {privileged: false}
---
# Source: web/templates/deployment.yaml
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: shop}
spec:
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec: {containers: [{name: web, image: nginx}]}
---
# Source: web/templates/service.yaml
apiVersion: v1
kind: Service
metadata: {name: web, namespace: shop}
spec: {ports: [{port: 80}]}
`

// storage is a release Secret (or ConfigMap) as kubectl prints it.
func storage(t testing.TB, kind, name, namespace string, revision int, status, manifest string) map[string]any {
	enc, err := EncodeRelease(NewRelease(name, namespace, revision, status, "web", "1.2.3", manifest))
	if err != nil {
		t.Fatal(err)
	}
	obj := map[string]any{"apiVersion": "v1", "kind": kind,
		"metadata": map[string]any{"name": "sh.helm.release.v1." + name + ".v" + strconv.Itoa(revision), "namespace": namespace,
			"labels": map[string]any{"owner": "helm", "name": name, "status": status, "version": strconv.Itoa(revision)}}}
	if kind == "Secret" {
		obj["type"] = HelmSecretType
		obj["data"] = map[string]any{"release": base64.StdEncoding.EncodeToString([]byte(enc))}
	} else {
		obj["data"] = map[string]any{"release": enc}
	}
	return obj
}

func toJSON(t testing.TB, v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestHelmReleaseStorage: a release Secret alone, a ConfigMap, and the List kubectl prints
// give the Ingress and the PodSecurityPolicy of the release's manifest, named after the
// release, and nothing for its apps/v1 and v1 objects; in a List only the latest deployed
// revision is checked unless --helm-all-revisions.
func TestHelmReleaseStorage(t *testing.T) {
	source := " helm release shop/web revision 3 (chart web-1.2.3)"
	want := func(prefix string) []string {
		return []string{prefix + source + "#1 removed-api 1.22", prefix + source + "#2 psp 1.25"}
	}
	secret := storage(t, "Secret", "web", "shop", 3, "deployed", releaseManifest)
	for _, tc := range []struct {
		name, input string
		args        []string
		want        []string
	}{
		{"secret", toJSON(t, secret), nil, want("stdin#1")},
		{"configmap", toJSON(t, storage(t, "ConfigMap", "web", "shop", 3, "deployed", releaseManifest)), nil, want("stdin#1")},
		{"list", toJSON(t, map[string]any{"apiVersion": "v1", "kind": "List", "items": []any{
			storage(t, "Secret", "web", "shop", 1, "superseded", "apiVersion: batch/v1beta1\nkind: CronJob\nmetadata: {name: old}\n"),
			secret,
			storage(t, "Secret", "web", "shop", 4, "failed", "apiVersion: batch/v1beta1\nkind: CronJob\nmetadata: {name: failed}\n"),
		}}), nil, want("stdin#1.items[1]")},
		{"list, every revision", toJSON(t, map[string]any{"apiVersion": "v1", "kind": "List", "items": []any{
			storage(t, "Secret", "web", "shop", 1, "superseded", "apiVersion: batch/v1beta1\nkind: CronJob\nmetadata: {name: old}\n"), secret,
		}}), []string{"--helm-all-revisions"}, append(want("stdin#1.items[1]"),
			"stdin#1.items[0] helm release shop/web revision 1 (chart web-1.2.3)#1 removed-api 1.25")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs, errOut, code := run(t, tc.input, append(tc.args, "-")...)
			if code != 3 {
				t.Errorf("exit %d, want 3: %s", code, errOut)
			}
			if tc.name == "list" && !strings.Contains(errOut, "2 older Helm revisions left out") {
				t.Errorf("summary: %s", errOut)
			}
			got := keys(fs)
			if strings.Join(got, "\n") != strings.Join(sorted(tc.want), "\n") {
				t.Errorf("findings:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(sorted(tc.want), "\n"))
			}
			for _, f := range fs {
				if f.Resource == "deployments" || f.Resource == "services" {
					t.Errorf("a finding for a served object: %+v", f)
				}
			}
		})
	}
	// A file of its own, as `kubectl get secret -o yaml` writes it.
	file := filepath.Join(t.TempDir(), "release.yaml")
	if err := os.WriteFile(file, []byte(toJSON(t, secret)), 0o644); err != nil {
		t.Fatal(err)
	}
	if fs, errOut, code := run(t, "", file); code != 3 || len(fs) != 2 || !strings.HasPrefix(fs[0].Source, file+"#1"+source) {
		t.Errorf("file: exit %d, %+v, %s", code, fs, errOut)
	}
}

// TestHelmReleaseBounds: a release that decompresses past --max-document-size is refused
// without being read to its end, and one that is not a release is an error naming it.
func TestHelmReleaseBounds(t *testing.T) {
	big := strings.Repeat(" ", 4<<20) // 4 MiB of spaces: a gzip of a few KiB
	bomb := storage(t, "Secret", "big", "shop", 1, "deployed", big)
	if len(toJSON(t, bomb)) > 64<<10 {
		t.Fatalf("the compressed release is %d bytes", len(toJSON(t, bomb)))
	}
	_, errOut, code := run(t, toJSON(t, bomb), "--max-document-size", strconv.Itoa(1<<20), "-")
	if code != 1 || !strings.Contains(errOut, "helm release: too large: decompresses to more than 1048576 bytes") {
		t.Errorf("exit %d: %s", code, errOut)
	}
	broken := storage(t, "Secret", "x", "shop", 1, "deployed", "")
	broken["data"] = map[string]any{"release": base64.StdEncoding.EncodeToString([]byte("not base64!"))}
	if _, errOut, code := run(t, toJSON(t, broken), "-"); code != 1 || !strings.Contains(errOut, "stdin: document 1: helm release: not base64 inside") {
		t.Errorf("exit %d: %s", code, errOut)
	}
}

func sorted(s []string) []string {
	out := append([]string(nil), s...)
	for i := range out {
		for j := i + 1; j < len(out); j++ {
			if out[j] < out[i] {
				out[i], out[j] = out[j], out[i]
			}
		}
	}
	return out
}

// A Helm release of a few KB that gunzips to a 50 MiB flat flow list (under
// --max-document-size: review 3 E1) is refused by its tokens with a clear error, before the
// parser holds them (each costs hundreds of bytes: past 7 GB before the bound).
func TestHelmReleaseOfMillionsOfTokens(t *testing.T) {
	list := "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: big}\ndata: {x: [" + strings.Repeat("1,", 25<<20) + "1]}\n"
	bomb := storage(t, "Secret", "big", "shop", 1, "deployed", list)
	if n := len(toJSON(t, bomb)); n > 1<<20 {
		t.Fatalf("the compressed release is %d bytes", n)
	}
	_, errOut, code := run(t, toJSON(t, bomb), "--max-document-size", strconv.Itoa(64<<20), "-")
	if code != 1 || !strings.Contains(errOut, "too large: more than 1048576 tokens") {
		t.Errorf("exit %d: %s", code, errOut)
	}
}
