package envelope

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/auditlens/auditlens/lib/auditevent"
	"github.com/auditlens/auditlens/lib/envelope/envelopetest"
)

// inputs splits a sample file as a reader of it would: one input per line, or the whole file
// when it is one document (.json, .gz).
func inputs(t testing.TB, file string) [][]byte {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	return splitInputs(file, b)
}

func splitInputs(name string, b []byte) [][]byte {
	if strings.HasSuffix(name, ".json") || strings.HasSuffix(name, ".gz") {
		return [][]byte{b}
	}
	var out [][]byte
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(nil, 16<<20)
	for sc.Scan() {
		if len(bytes.TrimSpace(sc.Bytes())) > 0 {
			out = append(out, bytes.Clone(sc.Bytes()))
		}
	}
	return out
}

// view is what an audit event decodes to, comparable, without the envelope annotation.
type view struct {
	auditevent.Event
	Annotations    map[string]string
	Request, Respo any
}

func viewOf(t testing.TB, ev *auditevent.Event) view {
	t.Helper()
	v := view{Annotations: map[string]string{}}
	for _, a := range ev.Annotations {
		if a.Key != Annotation {
			v.Annotations[a.Key] = a.Value
		}
	}
	if ev.RequestObjectRaw != nil {
		if err := json.Unmarshal(ev.RequestObjectRaw, &v.Request); err != nil {
			t.Fatal(err)
		}
	}
	if ev.ResponseObjectRaw != nil {
		if err := json.Unmarshal(ev.ResponseObjectRaw, &v.Respo); err != nil {
			t.Fatal(err)
		}
	}
	v.Event = auditevent.Event{
		APIVersion: ev.APIVersion, Kind: ev.Kind, Level: ev.Level, AuditID: ev.AuditID, Stage: ev.Stage,
		RequestURI: ev.RequestURI, Verb: ev.Verb, User: ev.User, SourceIPs: ev.SourceIPs, UserAgent: ev.UserAgent,
		RequestReceivedTimestamp: ev.RequestReceivedTimestamp, StageTimestamp: ev.StageTimestamp, Timestamp: ev.Timestamp,
	}
	if ev.ImpersonatedUser != nil {
		u := *ev.ImpersonatedUser
		v.ImpersonatedUser = &u
	}
	if ev.ObjectRef != nil {
		r := *ev.ObjectRef
		v.ObjectRef = &r
	}
	if ev.ResponseStatus != nil {
		s := *ev.ResponseStatus
		v.ResponseStatus = &s
	}
	// Deep-copy the strings: the decoder reuses its memory.
	b, _ := json.Marshal(v)
	var c view
	_ = json.Unmarshal(b, &c)
	return c
}

// decodeAll decodes data as a plain audit event or EventList.
func decodeAll(t testing.TB, data []byte) []view {
	t.Helper()
	var out []view
	if err := auditevent.NewDecoder(0).Decode(data, func(ev *auditevent.Event) error {
		out = append(out, viewOf(t, ev))
		return nil
	}); err != nil {
		t.Fatalf("decode unwrapped event: %v", err)
	}
	return out
}

type unwrapped struct {
	views   []view
	origins []Origin
	anns    []string
	st      Stats
}

// unwrapAll decodes every input of a file through Decoder.Decode, as classify scan does.
func unwrapAll(t testing.TB, ins [][]byte) unwrapped {
	t.Helper()
	var u unwrapped
	d, dec := NewDecoder(0), auditevent.NewDecoder(0)
	for i, in := range ins {
		var o Origin
		st, err := d.Unwrap(in, func(ev []byte, origin Origin) error {
			o = origin
			if err := dec.Decode(ev, func(e *auditevent.Event) error {
				u.views = append(u.views, viewOf(t, e))
				a, _ := e.Annotation(Annotation)
				u.anns = append(u.anns, strings.Clone(a))
				u.origins = append(u.origins, o)
				return nil
			}); err != nil {
				t.Errorf("input %d: decode unwrapped event: %v\n%s", i+1, err, ev)
			}
			return nil
		})
		if err != nil {
			t.Fatalf("input %d: unwrap: %v", i+1, err)
		}
		u.st.Events += st.Events
		u.st.Skipped += st.Skipped
	}
	return u
}

// innerEvents returns the audit events a sample holds, taken out with encoding/json as a
// reader who knows the format would: the reference for what Unwrap must return.
func innerEvents(t testing.TB, ins [][]byte) []view {
	t.Helper()
	var out []view
	add := func(log any) {
		switch l := log.(type) {
		case string:
			if strings.HasPrefix(strings.TrimSpace(l), "{") {
				out = append(out, decodeAll(t, []byte(l))...)
			}
		case map[string]any:
			b, _ := json.Marshal(l)
			out = append(out, decodeAll(t, b)...)
		}
	}
	for _, in := range ins {
		var doc map[string]any
		if err := json.Unmarshal(in, &doc); err != nil {
			t.Fatal(err)
		}
		recs, _ := doc["records"].([]any)
		if recs == nil {
			recs = []any{doc}
		}
		for _, r := range recs {
			r := r.(map[string]any)
			if props, ok := r["properties"].(map[string]any); ok {
				if c := r["category"]; c == "kube-audit" || c == "kube-audit-admin" {
					add(props["log"])
				}
			} else {
				add(r["message"])
			}
		}
	}
	return out
}

// TestAKSAndEKSSamples: every genuine AKS and EKS sample gives exactly the audit events it
// holds (the same as taking them out by hand), skips the records that are none, and says
// which cloud, envelope and cluster they came from.
func TestAKSAndEKSSamples(t *testing.T) {
	for _, tc := range []struct {
		file            string
		events, skipped int
		envelope        string
		cluster         string
	}{
		{"aks-eventhub-records-sysdiglabs.json", 22, 0, "aks/diagnostic-records", ""},
		{"aks-diagnostic-record-sumologic-docs.jsonl", 2, 0, "aks/diagnostic-record", ""},
		{"aks-diagnostic-record-dynatrace.jsonl", 1, 1, "aks/diagnostic-record", ""},
		{"aks-diagnostic-record-elastic.jsonl", 1, 0, "aks/diagnostic-record", "test-cluster"},
		{"aks-diagnostic-record-elastic-logobject.jsonl", 1, 0, "aks/diagnostic-record", ""},
		{"eks-cloudwatch-logevent-sumologic-docs.jsonl", 1, 0, "eks/cloudwatch-logevent", ""},
	} {
		t.Run(tc.file, func(t *testing.T) {
			ins := inputs(t, filepath.Join("testdata/managed", tc.file))
			got := unwrapAll(t, ins)
			want := innerEvents(t, ins)
			if got.st.Events != tc.events || len(got.views) != tc.events || got.st.Skipped != tc.skipped {
				t.Fatalf("events %d (decoded %d), skipped %d; want %d events, %d skipped", got.st.Events, len(got.views), got.st.Skipped, tc.events, tc.skipped)
			}
			if len(want) != tc.events {
				t.Fatalf("reference found %d events, want %d", len(want), tc.events)
			}
			for i := range want {
				if !reflect.DeepEqual(got.views[i], want[i]) {
					t.Errorf("event %d differs from the unwrapped event:\n got  %+v\n want %+v", i+1, got.views[i], want[i])
				}
				if got.anns[i] != tc.envelope || got.origins[i].Value() != tc.envelope {
					t.Errorf("event %d: annotation %q, origin %q; want %q", i+1, got.anns[i], got.origins[i].Value(), tc.envelope)
				}
				if tc.cluster != "" && got.origins[i].Cluster != tc.cluster {
					t.Errorf("event %d: cluster %q, want %q", i+1, got.origins[i].Cluster, tc.cluster)
				}
			}
		})
	}
}

// TestAKSClusterFromResourceID: the cluster is the resource id's managedClusters segment.
func TestAKSClusterFromResourceID(t *testing.T) {
	ins := inputs(t, "testdata/managed/aks-eventhub-records-sysdiglabs.json")
	u := unwrapAll(t, ins)
	if c := u.origins[0].Cluster; c == "" || strings.Contains(c, "/") {
		t.Fatalf("cluster %q from the resource id", c)
	}
}

// TestEKSBuiltEnvelopes: the EKS envelopes are BUILT (no genuine one is public) from the
// documented shapes around genuine EKS and GCE audit events; each gives those events back.
func TestEKSBuiltEnvelopes(t *testing.T) {
	var events [][]byte
	for _, f := range []string{"eks-oomkilled-lambda-readme.jsonl", "k8s-perf-tests-gce-scale.jsonl"} {
		events = append(events, inputs(t, filepath.Join("../auditevent/testdata/real-world", f))...)
	}
	var want []view
	for _, ev := range events {
		want = append(want, decodeAll(t, ev)...)
	}
	for _, sh := range envelopetest.Shapes(events) {
		t.Run(sh.Name, func(t *testing.T) {
			got := unwrapAll(t, splitInputs(sh.Name, sh.Data))
			if len(got.views) != len(want) || got.st.Skipped != sh.Skipped {
				t.Fatalf("%d events, %d skipped; want %d, %d", len(got.views), got.st.Skipped, len(want), sh.Skipped)
			}
			for i := range want {
				if !reflect.DeepEqual(got.views[i], want[i]) {
					t.Errorf("event %d differs:\n got  %+v\n want %+v", i+1, got.views[i], want[i])
				}
				if got.anns[i] != "eks/"+sh.Envelope {
					t.Errorf("event %d: annotation %q, want %q", i+1, got.anns[i], "eks/"+sh.Envelope)
				}
				if strings.Contains(sh.Envelope, "subscription") && got.origins[i].Cluster != envelopetest.Cluster {
					t.Errorf("event %d: cluster %q, want %q", i+1, got.origins[i].Cluster, envelopetest.Cluster)
				}
			}
		})
	}
}

// TestGKESamples: every GKE LogEntry becomes one audit event with the fields the rules read.
func TestGKESamples(t *testing.T) {
	type want struct {
		verb, group, version, resource, ns, name, sub, user, uri, ua, ip string
		code                                                             int32
		anns                                                             map[string]string
		level                                                            string
		cluster                                                          string
	}
	cases := map[string][]want{
		"gke-logentry-sekoia.jsonl": {
			{verb: "update", group: "", version: "v1", resource: "configmaps", ns: "kube-system", name: "cluster-kubestore", user: "system:kubestore-collector", uri: "/core/v1/namespaces/kube-system/configmaps/cluster-kubestore", code: 200, level: "Metadata", cluster: "cluster-1",
				anns: map[string]string{"authorization.k8s.io/decision": "allow"}},
		},
		"gke-logentry-khi.jsonl": {
			{verb: "create", version: "v1", resource: "pods", ns: "1-2-deployment-update", name: "nginx-deployment-surge-8655b4b8c5-xf5f4", code: 200, level: "RequestResponse", cluster: "sample-cluster",
				anns: map[string]string{"pod-security.kubernetes.io/enforce-policy": "privileged:latest"}},
			{verb: "patch", version: "v1", resource: "pods", ns: "1-2-deployment-update", name: "nginx-deployment-surge-8655b4b8c5-xf5f4", sub: "status", code: 200, cluster: "sample-cluster"},
			{verb: "patch", version: "v1", resource: "pods", ns: "1-2-deployment-update", name: "nginx-deployment-surge-8655b4b8c5-xf5f4", sub: "status", code: 200, cluster: "sample-cluster"},
		},
		"gke-logentry-elastic.jsonl": {
			{verb: "get", uri: "/readyz", code: 200, cluster: "test-cluster"},
			{verb: "get", uri: "/HNAP1", code: 403, cluster: "example-cluster"},
			{verb: "create", group: "authorization.k8s.io", version: "v1beta1", resource: "subjectaccessreviews", code: 200, level: "RequestResponse"},
			{verb: "list", version: "v1", resource: "nodes", uri: "/core/v1/nodes"},
			{verb: "list", group: "extensions", version: "v1beta1", resource: "ingresses", ns: "cos-auditd",
				anns: map[string]string{"k8s.io/deprecated": "true", "k8s.io/removed-release": "1.22"}},
			{verb: "get", uri: "/readyz"},
			{verb: "get", uri: "/api/v1"},
			{verb: "create", group: "authorization.k8s.io", version: "v1beta1", resource: "subjectaccessreviews",
				anns: map[string]string{"authentication.k8s.io/legacy-token": "system:serviceaccount:kube-system:metrics-server", "k8s.io/removed-release": "1.22"}},
			{verb: "patch", group: "apps", version: "v1", resource: "deployments", ns: "kube-system", name: "konnectivity-agent", user: "system:addon-manager", level: "RequestResponse", cluster: "iammai-340819-gke-cluster"},
		},
	}
	for file, wants := range cases {
		t.Run(file, func(t *testing.T) {
			got := unwrapAll(t, inputs(t, filepath.Join("testdata/managed", file)))
			if len(got.views) != len(wants) || got.st.Skipped != 0 {
				t.Fatalf("%d events, %d skipped; want %d, 0", len(got.views), got.st.Skipped, len(wants))
			}
			for i, w := range wants {
				ev := got.views[i]
				if ev.Verb != w.verb || ev.AuditID == "" || ev.Stage != "ResponseComplete" || ev.EventTime().IsZero() {
					t.Errorf("entry %d: verb %q auditID %q stage %q time %v", i+1, ev.Verb, ev.AuditID, ev.Stage, ev.EventTime())
				}
				if w.resource == "" {
					if ev.ObjectRef != nil {
						t.Errorf("entry %d: non-resource request with objectRef %+v", i+1, ev.ObjectRef)
					}
				} else if r := ev.ObjectRef; r == nil || r.APIGroup != w.group || r.APIVersion != w.version || r.Resource != w.resource || r.Namespace != w.ns || r.Name != w.name || r.Subresource != w.sub {
					t.Errorf("entry %d: objectRef %+v, want %+v", i+1, r, w)
				}
				if w.uri != "" && ev.RequestURI != w.uri {
					t.Errorf("entry %d: requestURI %q, want %q", i+1, ev.RequestURI, w.uri)
				}
				if w.user != "" && ev.User.Username != w.user {
					t.Errorf("entry %d: user %q, want %q", i+1, ev.User.Username, w.user)
				}
				if w.code != 0 && (ev.ResponseStatus == nil || ev.ResponseStatus.Code != w.code) {
					t.Errorf("entry %d: status %+v, want code %d", i+1, ev.ResponseStatus, w.code)
				}
				if w.level != "" && ev.Level != w.level {
					t.Errorf("entry %d: level %q, want %q", i+1, ev.Level, w.level)
				}
				if w.level == "RequestResponse" && (ev.Request == nil || ev.Respo == nil) {
					t.Errorf("entry %d: bodies missing", i+1)
				}
				for k, v := range w.anns {
					if ev.Annotations[k] != v {
						t.Errorf("entry %d: annotation %s = %q, want %q", i+1, k, ev.Annotations[k], v)
					}
				}
				if got.anns[i] != "gke/logentry" {
					t.Errorf("entry %d: envelope annotation %q", i+1, got.anns[i])
				}
				if w.cluster != "" && got.origins[i].Cluster != w.cluster {
					t.Errorf("entry %d: cluster %q, want %q", i+1, got.origins[i].Cluster, w.cluster)
				}
				if m, ok := ev.Request.(map[string]any); ok {
					if _, ok := m["@type"]; ok {
						t.Errorf("entry %d: requestObject keeps GKE's @type", i+1)
					}
				}
			}
		})
	}
}

// TestGKEArray: gcloud logging read --format=json prints a pretty-printed array of entries.
func TestGKEArray(t *testing.T) {
	var entries []json.RawMessage
	for _, in := range inputs(t, "testdata/managed/gke-logentry-elastic.jsonl") {
		entries = append(entries, in)
	}
	doc, _ := json.MarshalIndent(entries, "", "  ")
	u := unwrapAll(t, [][]byte{doc})
	if len(u.views) != 9 {
		t.Fatalf("%d events from the array, want 9", len(u.views))
	}
}

// TestDecodePlainFirst: Decoder.Decode reads plain events and EventLists as auditevent does,
// envelopes through Unwrap, and keeps auditevent's error for what is neither.
func TestDecodePlainFirst(t *testing.T) {
	d, dec := NewDecoder(0), auditevent.NewDecoder(0)
	plain := inputs(t, "../auditevent/testdata/real-world/eks-oomkilled-lambda-readme.jsonl")[0]
	n := 0
	count := func(*auditevent.Event) error { n++; return nil }
	if st, err := d.Decode(dec, plain, count); err != nil || n != 1 || st.Events != 0 {
		t.Fatalf("plain: %v, %d events, stats %+v", err, n, st)
	}
	n = 0
	env := inputs(t, "testdata/managed/aks-diagnostic-record-dynatrace.jsonl")
	st, err := d.Decode(dec, env[1], count)
	if err != nil || n != 0 || st.Skipped != 1 {
		t.Fatalf("klog record: %v, %d events, stats %+v", err, n, st)
	}
	for _, bad := range []string{`{"kind":"Pod"}`, `not json`, `[1,2]`, `2026-11-30T12:00:00Z klog text`} {
		_, err := d.Decode(dec, []byte(bad), count)
		if err == nil || !(errors.Is(err, auditevent.ErrNotAuditEvent) || errors.Is(err, auditevent.ErrNotJSON) || errors.Is(err, ErrNotEnvelope)) {
			t.Errorf("%s: %v", bad, err)
		}
	}
	// A bad event inside an envelope is reported; the good ones still pass.
	n = 0
	mixed := envelopetest.Subscription([][]byte{plain, []byte(`{"kind":"Event","apiVersion":"audit.k8s.io/v1"}`), plain})
	_, err = d.Decode(dec, mixed, count)
	if n != 2 || !errors.Is(err, auditevent.ErrNotAuditEvent) {
		t.Fatalf("mixed: %d events, %v", n, err)
	}
}

// TestSplit: ingest's view: copies with their identity, bad events flagged one by one.
func TestSplit(t *testing.T) {
	d := NewDecoder(0)
	ins := inputs(t, "testdata/managed/aks-eventhub-records-sysdiglabs.json")
	items, st, err := d.Split(ins[0], 1<<20)
	if err != nil || len(items) != 22 || st.Events != 22 {
		t.Fatalf("%d items, %+v, %v", len(items), st, err)
	}
	seen := map[string]bool{}
	for _, it := range items {
		if it.Err != nil || it.AuditID == "" || it.Origin.Cloud != AKS {
			t.Fatalf("item %+v", it)
		}
		seen[it.Key()] = true
		if !bytes.Contains(it.Raw, []byte(`"`+Annotation+`":"aks/diagnostic-records"`)) {
			t.Fatalf("raw lacks the envelope annotation: %s", it.Raw)
		}
	}
	if len(seen) != 22 {
		t.Fatalf("%d distinct keys, want 22", len(seen))
	}
	plain := inputs(t, "../auditevent/testdata/real-world/eks-oomkilled-lambda-readme.jsonl")[0]
	items, _, err = d.Split(envelopetest.Subscription([][]byte{plain, []byte(`{"kind":"Event"}`)}), 1<<20)
	if err != nil || len(items) != 2 || items[0].Err != nil || !errors.Is(items[1].Err, auditevent.ErrNotAuditEvent) {
		t.Fatalf("%+v, %v", items, err)
	}
}

// TestSplitAny: a message source reads plain events, EventLists and envelopes alike.
func TestSplitAny(t *testing.T) {
	d := NewDecoder(0)
	plain := inputs(t, "../auditevent/testdata/real-world/eks-oomkilled-lambda-readme.jsonl")[0]
	list := []byte(`{"kind":"EventList","apiVersion":"audit.k8s.io/v1","items":[` + string(plain) + `]}`)
	gke := inputs(t, "testdata/managed/gke-logentry-sekoia.jsonl")[0]
	for _, tc := range []struct {
		data  []byte
		cloud string
	}{{plain, ""}, {list, ""}, {gke, GKE}} {
		items, _, err := d.SplitAny(tc.data, 1<<20)
		if err != nil || len(items) != 1 || items[0].Origin.Cloud != tc.cloud || items[0].AuditID == "" {
			t.Errorf("%.40s: %+v %v", tc.data, items, err)
		}
	}
	if _, _, err := d.SplitAny([]byte(`{"kind":"Pod"}`), 1<<20); !errors.Is(err, auditevent.ErrNotAuditEvent) {
		t.Errorf("pod: %v", err)
	}
}
