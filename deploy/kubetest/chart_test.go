package kubetest

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/lint/support"
	"helm.sh/helm/v3/pkg/releaseutil"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/auditlens/auditlens/deploy/kubetest/kubeapiserver"
	"github.com/auditlens/auditlens/services/report/readiness/status"
	"github.com/auditlens/auditlens/services/report/weekly"
)

var update = flag.Bool("update", false, "rewrite the chart README's values table")

const chartDir = "../helm/auditlens"

// presets are the chart's ci/<name>-values.yaml files; each has the overlay of the same name
// under deploy/kubernetes/overlays, which installs the same thing.
var presets = []string{"aks", "cluster", "console", "eks", "eks-cloudwatch", "gke", "kafka", "quickstart", "self-managed", "webhook"}

// managedPresets must install no DaemonSet and no privileged namespace.
var managedPresets = map[string]bool{"aks": true, "eks": true, "eks-cloudwatch": true, "gke": true, "webhook": true}

func TestChartPresetsAreTheCIFiles(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(chartDir, "ci", "*-values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range files {
		names = append(names, strings.TrimSuffix(filepath.Base(f), "-values.yaml"))
	}
	sort.Strings(names)
	if !reflect.DeepEqual(names, presets) {
		t.Fatalf("ci/*-values.yaml are %v, the tests know %v", names, presets)
	}
}

func presetValues(t *testing.T, preset string) map[string]any {
	t.Helper()
	v, err := chartutil.ReadValuesFile(filepath.Join(chartDir, "ci", preset+"-values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// renderChart renders the chart as `helm template auditlens deploy/helm/auditlens -n auditlens`
// does, values validated against values.schema.json.
func renderChart(t *testing.T, vals map[string]any) ([]*unstructured.Unstructured, string, error) {
	t.Helper()
	ch, err := loader.Load(chartDir)
	if err != nil {
		t.Fatal(err)
	}
	cfg := &action.Configuration{Log: t.Logf}
	inst := action.NewInstall(cfg)
	inst.DryRun, inst.ClientOnly, inst.Replace = true, true, true
	inst.ReleaseName, inst.Namespace = "auditlens", "auditlens"
	inst.KubeVersion = &chartutil.KubeVersion{Version: "v1.37.2", Major: "1", Minor: "37"}
	rel, err := inst.Run(ch, vals)
	if err != nil {
		return nil, "", err
	}
	var out []*unstructured.Unstructured
	manifests := releaseutil.SplitManifests(rel.Manifest)
	keys := make([]string, 0, len(manifests))
	for k := range manifests {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		u := &unstructured.Unstructured{}
		if err := yaml.UnmarshalStrict([]byte(manifests[k]), &u.Object); err != nil {
			t.Fatalf("%s: %v\n%s", k, err, manifests[k])
		}
		if len(u.Object) > 0 {
			out = append(out, u)
		}
	}
	return out, rel.Info.Notes, nil
}

// TestChartLint is `helm lint --strict` with every preset: no warning, no error.
func TestChartLint(t *testing.T) {
	for _, p := range presets {
		l := action.NewLint()
		l.Strict, l.Namespace = true, "auditlens"
		l.KubeVersion = &chartutil.KubeVersion{Version: "v1.37.2", Major: "1", Minor: "37"}
		res := l.Run([]string{chartDir}, presetValues(t, p))
		for _, m := range res.Messages {
			if m.Severity >= support.WarningSev {
				t.Errorf("%s: %s", p, m)
			}
		}
		for _, err := range res.Errors {
			t.Errorf("%s: %v", p, err)
		}
	}
}

// The chart's version and appVersion are the release's, deploy/VERSION.
func TestChartVersionIsTheRelease(t *testing.T) {
	b, err := os.ReadFile("../VERSION")
	if err != nil {
		t.Fatal(err)
	}
	ch, err := loader.Load(chartDir)
	if err != nil {
		t.Fatal(err)
	}
	v := string(bytes.TrimSpace(b))
	if ch.Metadata.AppVersion != v || ch.Metadata.Version != v {
		t.Fatalf("Chart.yaml version %q appVersion %q, deploy/VERSION %q", ch.Metadata.Version, ch.Metadata.AppVersion, v)
	}
}

// Without the cluster's name nothing renders, and the message names the value to set.
func TestChartRequiresTheClusterName(t *testing.T) {
	for _, vals := range []map[string]any{{}, {"cluster": map[string]any{"name": ""}}} {
		_, _, err := renderChart(t, vals)
		if err == nil || !strings.Contains(err.Error(), ".Values.cluster.name") {
			t.Errorf("values %v: %v, want an error naming .Values.cluster.name", vals, err)
		}
	}
}

// The gate without its target versions renders nothing, and the message names the value.
func TestChartReadinessRequiresTargetVersions(t *testing.T) {
	vals := map[string]any{"cluster": map[string]any{"name": "a"}, "readiness": map[string]any{"enabled": true}}
	if _, _, err := renderChart(t, vals); err == nil || !strings.Contains(err.Error(), ".Values.readiness.targetVersions") {
		t.Errorf("values %v: %v, want an error naming .Values.readiness.targetVersions", vals, err)
	}
}

// With the gate, NOTES.txt names the object of the last target version to wait on, as report
// names it (status.Name: the cluster when it is a name, else with a hash of it).
func TestChartReadinessNotes(t *testing.T) {
	for _, cluster := range []string{"-Prod__EU.1", "prod-eu-1"} {
		vals := presetValues(t, "self-managed")
		vals["cluster"] = map[string]any{"name": cluster}
		_, notes, err := renderChart(t, vals)
		if err != nil {
			t.Fatal(err)
		}
		name, err := status.Name(cluster, weekly.Version{Major: 1, Minor: 35})
		if err != nil {
			t.Fatal(err)
		}
		if want := "kubectl wait --for=condition=Ready upgradereadiness/" + name + " --timeout=24h"; !strings.Contains(notes, want) {
			t.Errorf("cluster %q: NOTES.txt does not say %q:\n%s", cluster, want, notes)
		}
	}
}

// owners and acknowledgements from an existing ConfigMap: mounted into report and the weekly
// CronJob from it, no ConfigMap of the chart's own.
func TestChartFilesFromAnExistingConfigMap(t *testing.T) {
	vals := presetValues(t, "self-managed")
	vals["owners"] = map[string]any{"inline": "ignored", "configMap": "team-owners"}
	vals["acknowledgements"] = map[string]any{"configMap": "risk-register"}
	objs, _, err := renderChart(t, vals)
	if err != nil {
		t.Fatal(err)
	}
	mounted := 0
	for _, o := range objs {
		if o.GetKind() == "ConfigMap" && (o.GetName() == "auditlens-owners" || o.GetName() == "auditlens-acknowledgements") {
			t.Errorf("ConfigMap %s rendered, want the existing one used", o.GetName())
		}
		path := []string{"spec", "template", "spec", "volumes"}
		if o.GetKind() == "CronJob" {
			path = []string{"spec", "jobTemplate", "spec", "template", "spec", "volumes"}
		} else if o.GetName() != "report" || o.GetKind() != "Deployment" {
			continue
		}
		vols, _, _ := unstructured.NestedSlice(o.Object, path...)
		var names []string
		for _, v := range vols {
			if cm, ok := v.(map[string]any)["configMap"].(map[string]any); ok {
				names = append(names, cm["name"].(string))
			}
		}
		if !slices.Equal(names, []string{"team-owners", "risk-register"}) {
			t.Errorf("%s %s mounts ConfigMaps %v, want [team-owners risk-register]", o.GetKind(), o.GetName(), names)
		}
		mounted++
	}
	if mounted != 2 {
		t.Errorf("%d workloads mount the files, want report and report-weekly", mounted)
	}
}

// The ClickHouse DSN (with its password) is kept in a Secret, the chart's or the user's own
// (config.clickhouse.existingSecret), and no ConfigMap carries it (review 3 E17).
func TestChartClickHouseDSNInASecret(t *testing.T) {
	const dsn = "clickhouse://auditlens:s3cret-pw@clickhouse.clickhouse:9000/auditlens"
	for _, existing := range []string{"", "team-clickhouse"} {
		vals := presetValues(t, "self-managed")
		vals["config"] = map[string]any{"clickhouse": map[string]any{"dsn": dsn, "existingSecret": existing}}
		objs, _, err := renderChart(t, vals)
		if err != nil {
			t.Fatal(err)
		}
		wantSecret := existing
		if existing == "" {
			wantSecret = "auditlens-clickhouse"
		}
		secrets, readers := 0, 0
		for _, o := range objs {
			doc, err := json.Marshal(o.Object)
			if err != nil {
				t.Fatal(err)
			}
			switch o.GetKind() {
			case "Secret":
				if o.GetName() == "auditlens-clickhouse" {
					secrets++
					if got, _, _ := unstructured.NestedString(o.Object, "stringData", "AUDITLENS_CLICKHOUSE_DSN"); got != dsn {
						t.Errorf("existingSecret %q: Secret auditlens-clickhouse holds %q, want %q", existing, got, dsn)
					}
				}
				continue
			case "ConfigMap":
				if strings.Contains(string(doc), "s3cret-pw") {
					t.Errorf("existingSecret %q: ConfigMap %s carries the ClickHouse password", existing, o.GetName())
				}
			}
			if strings.Contains(string(doc), `"secretRef":{"name":"`+wantSecret+`"}`) {
				readers++
			}
		}
		if want := map[bool]int{true: 1, false: 0}[existing == ""]; secrets != want {
			t.Errorf("existingSecret %q: %d Secrets auditlens-clickhouse rendered, want %d", existing, secrets, want)
		}
		if readers != 2 {
			t.Errorf("existingSecret %q: %d workloads read the Secret %s, want report and report-weekly", existing, readers, wantSecret)
		}
	}
}

// report's egress to the apiserver is to the addresses of networkPolicy.apiServer.cidrs only;
// without them it is to any address on 443/6443 and NOTES says so (review 3 E17).
func TestChartAPIServerEgress(t *testing.T) {
	for _, cidrs := range [][]any{nil, {"10.0.0.1/32", "fd00::1/128"}} {
		vals := presetValues(t, "self-managed")
		vals["networkPolicy"] = map[string]any{"apiServer": map[string]any{"cidrs": cidrs}}
		objs, notes, err := renderChart(t, vals)
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for _, o := range objs {
			if o.GetKind() != "NetworkPolicy" || o.GetName() != "allow-apiserver" {
				continue
			}
			found = true
			egress, _, _ := unstructured.NestedSlice(o.Object, "spec", "egress")
			if len(egress) != 1 {
				t.Fatalf("allow-apiserver: %d egress rules, want 1", len(egress))
			}
			var got []any
			to, _, _ := unstructured.NestedSlice(egress[0].(map[string]any), "to")
			for _, peer := range to {
				got = append(got, peer.(map[string]any)["ipBlock"].(map[string]any)["cidr"])
			}
			if !slices.Equal(got, cidrs) {
				t.Errorf("cidrs %v: allow-apiserver goes to %v", cidrs, got)
			}
		}
		if !found {
			t.Errorf("cidrs %v: no NetworkPolicy allow-apiserver with readiness on", cidrs)
		}
		if warned := strings.Contains(notes, "report may reach any address on ports 443 and 6443"); warned != (cidrs == nil) {
			t.Errorf("cidrs %v: NOTES warn of open egress %v\n%s", cidrs, warned, notes)
		}
	}
}

// values.schema.json refuses unknown keys and wrong types, with the key in the message.
func TestChartSchemaRefusesBadValues(t *testing.T) {
	for _, c := range []struct {
		yaml, want string
	}{
		{"cluster: {name: a}\nclasify: {replicas: 2}", "clasify"},
		{"cluster: {name: a}\nclassify: {replica: 2}", "replica"},
		{"cluster: {name: a}\nclassify: {replicas: two}", "replicas"},
		{"cluster: {name: a}\ningest: {file: {enabled: \"yes\"}}", "enabled"},
		{"cluster: {name: a}\nconfig: {logFormat: xml}", "logFormat"},
		{"cluster: {name: a}\nclassify: {resources: {requests: {cpu: [1]}}}", "cpu"},
		{"cluster: {name: a}\nnetworkPolicy: {monitoringNamespace: Monitoring_NS}", "monitoringNamespace"},
		{"cluster: {name: 5}", "name"},
		{"cluster: {name: a}\nreadiness: {enable: true}", "enable"},
		{"cluster: {name: a}\nreadiness: {enabled: true, targetVersions: 1.34.2}", "targetVersions"},
		{"cluster: {name: a}\nowners: {inlin: x}", "inlin"},
		{"cluster: {name: a}\nacknowledgements: {configMap: Bad_Name}", "configMap"},
	} {
		vals, err := chartutil.ReadValues([]byte(c.yaml))
		if err != nil {
			t.Fatal(err)
		}
		_, _, err = renderChart(t, vals)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: %v, want a schema error naming %s", c.yaml, err, c.want)
		}
	}
}

// TestChartPresetsApplyToARealAPIServer applies every preset's rendering server-side to a real
// kube-apiserver, as the kustomizations are: every object accepted with no warning. The
// release's namespace is created first, as `kubectl create namespace` would (with the
// restricted Pod Security labels the README gives).
func TestChartPresetsApplyToARealAPIServer(t *testing.T) {
	s := kubeapiserver.Start(t, kubeapiserver.Options{})
	w := &warnings{}
	a := newApplier(t, s, w)
	applyMonitoringCRDs(t, a, w)
	ns := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{
		"name": "auditlens", "labels": map[string]any{"pod-security.kubernetes.io/enforce": "restricted", "pod-security.kubernetes.io/enforce-version": "latest",
			"pod-security.kubernetes.io/audit": "restricted", "pod-security.kubernetes.io/warn": "restricted"}}}}
	if err := a.apply(ns, false); err != nil {
		t.Fatal(err)
	}
	for _, p := range presets {
		objs, notes, err := renderChart(t, presetValues(t, p))
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		if !strings.Contains(notes, "port-forward deploy/report 9104") || !strings.Contains(notes, "auditlens_ingest_events_published_total") {
			t.Errorf("%s: NOTES.txt does not say how to open the console and check that events arrive:\n%s", p, notes)
		}
		sort.SliceStable(objs, func(i, j int) bool { return objs[i].GetKind() == "Namespace" && objs[j].GetKind() != "Namespace" })
		for _, obj := range objs {
			id := p + ": " + obj.GetKind() + " " + obj.GetNamespace() + "/" + obj.GetName()
			if managedPresets[p] && (obj.GetKind() == "DaemonSet" || obj.GetKind() == "Namespace" && obj.GetLabels()["pod-security.kubernetes.io/enforce"] == "privileged") {
				t.Errorf("%s: a managed control plane's preset installs no DaemonSet and no privileged namespace", id)
			}
			if err := a.apply(obj, false); err != nil {
				t.Errorf("%s: %v", id, err)
			}
			if l := w.take(); len(l) > 0 {
				t.Errorf("%s: warnings %q", id, l)
			}
		}
		t.Logf("%s: %d objects applied", p, len(objs))
	}
}

// TestChartAgreesWithKustomize renders each preset and the overlay of the same name (with the
// same cluster name) and compares them object by object: the same kinds, namespaces and names,
// and the same pod specs (containers' images, args, env, security contexts, resources, probes,
// volumes), replicas, ConfigMap data, Service, NetworkPolicy and PodDisruptionBudget specs, RBAC
// and monitoring objects. Labels and annotations may differ (Helm adds its own). The release's
// own namespace is created by the installer, not by the chart.
func TestChartAgreesWithKustomize(t *testing.T) {
	for _, p := range presets {
		t.Run(p, func(t *testing.T) {
			chartObjs, _, err := renderChart(t, presetValues(t, p))
			if err != nil {
				t.Fatal(err)
			}
			kObjs, err := renderKustomization(filepath.Join("..", "kubernetes"), "overlays/"+p)
			if err != nil {
				t.Fatal(err)
			}
			chart, kust := comparable(t, chartObjs), comparable(t, kObjs)
			delete(kust, "Namespace /auditlens")
			for id := range kust {
				if _, ok := chart[id]; !ok {
					t.Errorf("kustomize has %s, the chart does not", id)
				}
			}
			for id, c := range chart {
				k, ok := kust[id]
				if !ok {
					t.Errorf("the chart has %s, kustomize does not", id)
					continue
				}
				for _, d := range differences("", c, k) {
					t.Errorf("%s: %s", id, d)
				}
			}
			t.Logf("%d objects agree", len(chart))
		})
	}
}

// comparable maps "Kind namespace/name" to the parts of an object that must agree, as JSON
// values (numbers as float64), so that YAML spellings do not matter.
func comparable(t *testing.T, objs []*unstructured.Unstructured) map[string]any {
	out := map[string]any{}
	for _, o := range objs {
		var part any
		switch o.GetKind() {
		case "Deployment", "StatefulSet", "DaemonSet":
			spec := o.Object["spec"].(map[string]any)
			tmpl := spec["template"].(map[string]any)
			part = map[string]any{"replicas": spec["replicas"], "selector": spec["selector"], "pod": tmpl["spec"],
				"podLabels": podLabels(tmpl), "volumeClaimTemplates": spec["volumeClaimTemplates"], "updateStrategy": spec["updateStrategy"]}
		case "CronJob":
			spec := o.Object["spec"].(map[string]any)
			job := spec["jobTemplate"].(map[string]any)["spec"].(map[string]any)
			tmpl := job["template"].(map[string]any)
			rest := map[string]any{}
			for k, v := range spec {
				if k != "jobTemplate" {
					rest[k] = v
				}
			}
			part = map[string]any{"schedule": rest, "pod": tmpl["spec"], "podLabels": podLabels(tmpl)}
		case "ConfigMap":
			part = o.Object["data"]
		case "Secret":
			part = map[string]any{"type": o.Object["type"], "data": o.Object["data"], "stringData": o.Object["stringData"]}
		case "ClusterRole":
			part = o.Object["rules"]
		case "ClusterRoleBinding":
			part = map[string]any{"roleRef": o.Object["roleRef"], "subjects": o.Object["subjects"]}
		case "ServiceAccount":
			part = map[string]any{"automount": o.Object["automountServiceAccountToken"], "annotations": o.GetAnnotations()}
		case "Namespace":
			l := map[string]any{}
			for k, v := range o.GetLabels() {
				if strings.HasPrefix(k, "pod-security.kubernetes.io/") {
					l[k] = v
				}
			}
			part = l
		default:
			part = o.Object["spec"]
		}
		b, err := json.Marshal(part)
		if err != nil {
			t.Fatal(err)
		}
		var v any
		if err := json.Unmarshal(b, &v); err != nil {
			t.Fatal(err)
		}
		// The chart selects its own release's pods (app.kubernetes.io/instance, so that two
		// releases never select each other's); kustomize installs one instance.
		withoutInstance(v)
		id := fmt.Sprintf("%s %s/%s", o.GetKind(), o.GetNamespace(), o.GetName())
		if _, dup := out[id]; dup {
			t.Errorf("%s twice", id)
		}
		out[id] = v
	}
	return out
}

// differences lists where chart (c) and kustomize (k) values differ, by JSON path.
func differences(path string, c, k any) []string {
	cm, cok := c.(map[string]any)
	km, kok := k.(map[string]any)
	if cok && kok {
		var out []string
		keys := map[string]bool{}
		for x := range cm {
			keys[x] = true
		}
		for x := range km {
			keys[x] = true
		}
		sorted := make([]string, 0, len(keys))
		for x := range keys {
			sorted = append(sorted, x)
		}
		sort.Strings(sorted)
		for _, x := range sorted {
			out = append(out, differences(path+"."+x, cm[x], km[x])...)
		}
		return out
	}
	cl, cok := c.([]any)
	kl, kok := k.([]any)
	if cok && kok && len(cl) == len(kl) {
		var out []string
		for i := range cl {
			out = append(out, differences(fmt.Sprintf("%s[%d]", path, i), cl[i], kl[i])...)
		}
		return out
	}
	if reflect.DeepEqual(c, k) {
		return nil
	}
	cj, _ := json.Marshal(c)
	kj, _ := json.Marshal(k)
	return []string{fmt.Sprintf("%s: chart %s, kustomize %s", path, cj, kj)}
}

// podLabels are a pod template's labels but Helm's own.
// withoutInstance deletes every app.kubernetes.io/instance key under v.
func withoutInstance(v any) {
	switch x := v.(type) {
	case map[string]any:
		delete(x, "app.kubernetes.io/instance")
		for _, e := range x {
			withoutInstance(e)
		}
	case []any:
		for _, e := range x {
			withoutInstance(e)
		}
	}
}

func podLabels(tmpl map[string]any) map[string]any {
	out := map[string]any{}
	md, _ := tmpl["metadata"].(map[string]any)
	l, _ := md["labels"].(map[string]any)
	for k, v := range l {
		if k != "helm.sh/chart" && k != "app.kubernetes.io/managed-by" && k != "app.kubernetes.io/instance" {
			out[k] = v
		}
	}
	return out
}

// TestChartValuesTable: README.md's values table is generated from values.schema.json (key,
// type, description) and values.yaml (default); -update rewrites it.
func TestChartValuesTable(t *testing.T) {
	readme := filepath.Join(chartDir, "README.md")
	b, err := os.ReadFile(readme)
	if err != nil {
		t.Fatal(err)
	}
	const begin, end = "<!-- values-table:begin (generated by deploy/kubetest TestChartValuesTable -update) -->\n", "<!-- values-table:end -->"
	i, j := bytes.Index(b, []byte(begin)), bytes.Index(b, []byte(end))
	if i < 0 || j < i {
		t.Fatalf("%s has no %q ... %q markers", readme, begin, end)
	}
	table := valuesTable(t)
	got := string(b[i+len(begin) : j])
	if got == table {
		return
	}
	if *update {
		out := append(append(append([]byte{}, b[:i+len(begin)]...), table...), b[j:]...)
		if err := os.WriteFile(readme, out, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Fatalf("%s: the values table is stale; run: cd deploy/kubetest && GOWORK=off go test -run TestChartValuesTable -update .", readme)
}

type schemaNode struct {
	Type        any                    `json:"type"`
	Description string                 `json:"description"`
	Properties  map[string]*schemaNode `json:"properties"`
	Ref         string                 `json:"$ref"`
	Enum        []any                  `json:"enum"`
}

func valuesTable(t *testing.T) string {
	b, err := os.ReadFile(filepath.Join(chartDir, "values.schema.json"))
	if err != nil {
		t.Fatal(err)
	}
	var root schemaNode
	if err := json.Unmarshal(b, &root); err != nil {
		t.Fatal(err)
	}
	defaults, err := chartutil.ReadValuesFile(filepath.Join(chartDir, "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var rows []string
	var walk func(prefix string, n *schemaNode)
	walk = func(prefix string, n *schemaNode) {
		keys := make([]string, 0, len(n.Properties))
		for k := range n.Properties {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			c, key := n.Properties[k], strings.TrimPrefix(prefix+"."+k, ".")
			if len(c.Properties) > 0 {
				walk(key, c)
				continue
			}
			typ := fmt.Sprint(c.Type)
			switch {
			case c.Ref == "#/$defs/resources":
				typ = "resources"
			case c.Ref != "":
				typ = "string"
			case len(c.Enum) > 0:
				var e []string
				for _, v := range c.Enum {
					e = append(e, fmt.Sprintf("%q", v))
				}
				typ = "one of " + strings.Join(e, ", ")
			}
			if c.Description == "" {
				t.Errorf("values.schema.json: %s has no description", key)
			}
			def, ok := lookup(defaults, key)
			if !ok {
				t.Errorf("values.yaml has no %s (the schema describes it)", key)
			}
			d, _ := json.Marshal(def)
			rows = append(rows, fmt.Sprintf("| `%s` | %s | `%s` | %s |", key, strings.ReplaceAll(typ, "|", "\\|"), d, strings.ReplaceAll(c.Description, "|", "\\|")))
		}
	}
	walk("", &root)
	// Every leaf of values.yaml is described by the schema.
	var leaves func(prefix string, v map[string]any)
	described := strings.Join(rows, "\n")
	leaves = func(prefix string, v map[string]any) {
		for k, x := range v {
			key := strings.TrimPrefix(prefix+"."+k, ".")
			if m, ok := x.(map[string]any); ok && !strings.Contains(described, "| `"+key+"` |") {
				leaves(key, m)
				continue
			}
			if !regexp.MustCompile("\\| `" + regexp.QuoteMeta(key) + "` \\|").MatchString(described) {
				t.Errorf("values.yaml: %s is in no row of the table (describe it in values.schema.json)", key)
			}
		}
	}
	leaves("", defaults)
	return "| Key | Type | Default | Description |\n|---|---|---|---|\n" + strings.Join(rows, "\n") + "\n"
}

// lookup finds the value at a dotted key in values.yaml, maps included.
func lookup(v map[string]any, key string) (any, bool) {
	var cur any = v
	for _, k := range strings.Split(key, ".") {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil, false
		}
		if cur, ok = m[k]; !ok {
			return nil, false
		}
	}
	return cur, true
}

// TestChartPodSettings: imagePullSecrets, podAnnotations, priorityClassName, nodeSelector,
// tolerations and affinity reach the pods of every workload of every preset (the quickstart's NATS and ClickHouse too) (the ingest
// DaemonSet keeps its own control-plane placement, taking the chart's affinity), and what
// they render applies to the real apiserver.
func TestChartPodSettings(t *testing.T) {
	s := kubeapiserver.Start(t, kubeapiserver.Options{})
	w := &warnings{}
	a := newApplier(t, s, w)
	applyMonitoringCRDs(t, a, w)
	for _, ns := range []string{"auditlens", "auditlens-pods"} {
		if err := a.apply(&unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": ns}}}, false); err != nil {
			t.Fatal(err)
		}
	}
	affinity := map[string]any{"nodeAffinity": map[string]any{"requiredDuringSchedulingIgnoredDuringExecution": map[string]any{
		"nodeSelectorTerms": []any{map[string]any{"matchExpressions": []any{map[string]any{"key": "pool", "operator": "In", "values": []any{"audit"}}}}}}}}
	settings := map[string]any{
		"imagePullSecrets":  []any{map[string]any{"name": "regcred"}},
		"podAnnotations":    map[string]any{"team.example.com/owner": "platform"},
		"priorityClassName": "platform-critical",
		"nodeSelector":      map[string]any{"pool": "audit"},
		"tolerations":       []any{map[string]any{"key": "dedicated", "operator": "Equal", "value": "audit", "effect": "NoSchedule"}},
		"affinity":          affinity,
	}
	kinds := map[string]bool{}
	for _, p := range presets {
		vals := presetValues(t, p)
		for k, v := range settings {
			vals[k] = v
		}
		if p == "self-managed" {
			vals["weekly"] = map[string]any{"enabled": true, "smtpAddr": "smtp.example.com:587", "mailFrom": "a@example.com", "mailTo": "b@example.com"}
		}
		objs, _, err := renderChart(t, vals)
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		for _, o := range objs {
			path := []string{"spec", "template"}
			switch o.GetKind() {
			case "Deployment", "DaemonSet", "StatefulSet":
			case "CronJob":
				path = []string{"spec", "jobTemplate", "spec", "template"}
			default:
				continue
			}
			tmpl, _, _ := unstructured.NestedMap(o.Object, path...)
			kinds[o.GetKind()] = true
			id := p + ": " + o.GetKind() + " " + o.GetName()
			ann, _, _ := unstructured.NestedStringMap(tmpl, "metadata", "annotations")
			spec, _ := tmpl["spec"].(map[string]any)
			if ann["team.example.com/owner"] != "platform" || spec["priorityClassName"] != "platform-critical" ||
				!jsonEqual(spec["imagePullSecrets"], settings["imagePullSecrets"]) || !jsonEqual(spec["affinity"], affinity) {
				t.Errorf("%s: annotations %v, priorityClassName %v, imagePullSecrets %v, affinity %v", id, ann, spec["priorityClassName"], spec["imagePullSecrets"], spec["affinity"])
			}
			wantSelector, wantTolerations := settings["nodeSelector"], settings["tolerations"]
			if o.GetKind() == "DaemonSet" {
				wantSelector = map[string]any{"node-role.kubernetes.io/control-plane": ""}
				wantTolerations = []any{map[string]any{"key": "node-role.kubernetes.io/control-plane", "operator": "Exists", "effect": "NoSchedule"}}
			}
			if !jsonEqual(spec["nodeSelector"], wantSelector) || !jsonEqual(spec["tolerations"], wantTolerations) {
				t.Errorf("%s: nodeSelector %v, tolerations %v; want %v, %v", id, spec["nodeSelector"], spec["tolerations"], wantSelector, wantTolerations)
			}
		}
		if p == "self-managed" || p == "eks-cloudwatch" {
			sort.SliceStable(objs, func(i, j int) bool { return objs[i].GetKind() == "Namespace" && objs[j].GetKind() != "Namespace" })
			for _, o := range objs {
				if err := a.apply(o, false); err != nil {
					t.Errorf("%s: apply %s %s: %v", p, o.GetKind(), o.GetName(), err)
				}
				w.take()
			}
		}
	}
	for _, k := range []string{"Deployment", "DaemonSet", "StatefulSet", "CronJob"} {
		if !kinds[k] {
			t.Errorf("no preset renders a %s: the test checks too little", k)
		}
	}
}
