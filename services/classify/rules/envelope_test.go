package rules

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/auditlens/auditlens/lib/auditevent"
	"github.com/auditlens/auditlens/lib/envelope"
	"github.com/auditlens/auditlens/lib/envelope/envelopetest"
	auditlensv1 "github.com/auditlens/auditlens/proto/auditlens/v1"
)

// managedDir holds the genuine AKS, GKE and EKS envelope samples (a copy of
// shared/testdata/managed).
const managedDir = "../../../lib/envelope/testdata/managed"

func sampleInputs(t *testing.T, name string, b []byte) [][]byte {
	t.Helper()
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

func findingsOf(t *testing.T, e *Engine, data []byte) []*auditlensv1.Finding {
	t.Helper()
	var out []*auditlensv1.Finding
	err := auditevent.NewDecoder(0).Decode(data, func(ev *auditevent.Event) error {
		for _, m := range e.Classify(ev, nil) {
			out = append(out, e.Finding(ev, &m, "c", ""))
		}
		return nil
	})
	if err != nil {
		t.Fatalf("decode: %v", err)
	}
	return out
}

// handUnwrapped takes the audit events out of an AKS record or a CloudWatch log event with
// encoding/json, as a reader who knows the format would: the reference for the findings.
func handUnwrapped(t *testing.T, in []byte) [][]byte {
	var doc map[string]any
	if err := json.Unmarshal(in, &doc); err != nil {
		t.Fatal(err)
	}
	recs, _ := doc["records"].([]any)
	if recs == nil {
		recs = []any{doc}
	}
	var out [][]byte
	for _, r := range recs {
		r := r.(map[string]any)
		log := r["message"]
		if p, ok := r["properties"].(map[string]any); ok {
			if c := r["category"]; c != "kube-audit" && c != "kube-audit-admin" {
				continue
			}
			log = p["log"]
		}
		switch l := log.(type) {
		case string:
			out = append(out, []byte(l))
		case map[string]any:
			b, _ := json.Marshal(l)
			out = append(out, b)
		}
	}
	return out
}

// TestEnvelopeFindings: every sample in an envelope gives the findings its events give
// unwrapped (every field equal), plus the evidence naming the envelope. GKE entries have no
// unwrapped audit.k8s.io event: their findings are the golden file's, reviewed by hand (the
// deprecated extensions/v1beta1 ingresses and authorization.k8s.io/v1beta1
// subjectaccessreviews, the legacy service account token).
func TestEnvelopeFindings(t *testing.T) {
	e := mustEngine(t)
	type sample struct {
		name   string
		data   []byte
		events [][]byte // the unwrapped events; nil for GKE
	}
	var samples []sample
	files, _ := filepath.Glob(filepath.Join(managedDir, "*.json*"))
	if len(files) != 9 {
		t.Fatalf("%d samples in %s, want 9", len(files), managedDir)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		s := sample{name: filepath.Base(f), data: b}
		if !strings.HasPrefix(s.name, "gke-") {
			for _, in := range sampleInputs(t, s.name, b) {
				s.events = append(s.events, handUnwrapped(t, in)...)
			}
		}
		samples = append(samples, s)
	}
	// EKS: no genuine envelope is public; these envelopes are BUILT from the documented
	// shapes around genuine events (two of which give removed-api findings).
	var real [][]byte
	for _, f := range []string{"eks-oomkilled-lambda-readme.jsonl", "k8s-perf-tests-gce-scale.jsonl"} {
		b, err := os.ReadFile(filepath.Join(corpusDir, f))
		if err != nil {
			t.Fatal(err)
		}
		real = append(real, sampleInputs(t, f, b)...)
	}
	for _, sh := range envelopetest.Shapes(real) {
		samples = append(samples, sample{name: "built-eks-" + sh.Name, data: sh.Data, events: real})
	}
	var golden bytes.Buffer
	total := 0
	for _, s := range samples {
		t.Run(s.name, func(t *testing.T) {
			var got []*auditlensv1.Finding
			var envs []string
			d, dec := envelope.NewDecoder(0), auditevent.NewDecoder(0)
			for _, in := range sampleInputs(t, s.name, s.data) {
				_, err := d.Decode(dec, in, func(ev *auditevent.Event) error {
					for _, m := range e.Classify(ev, nil) {
						got = append(got, e.Finding(ev, &m, "c", ""))
					}
					return nil
				})
				if err != nil {
					t.Fatalf("decode: %v", err)
				}
			}
			for _, f := range got {
				last := f.Evidence[len(f.Evidence)-1]
				if last.Path != EnvelopeEvidencePath || !strings.Contains(last.Value, "/") {
					t.Fatalf("finding %s without the envelope evidence: %v", f.RuleId, f.Evidence)
				}
				envs = append(envs, last.Value)
				f.Evidence = f.Evidence[:len(f.Evidence)-1]
				fmt.Fprintf(&golden, "%s %s %s/%s %s ns=%s user=%s removed_in=%s via=%s\n", s.name, f.RuleId, f.ApiGroup, f.ApiVersion, f.Resource, f.Namespace, f.Username, f.RemovedIn, last.Value)
			}
			total += len(got)
			if s.events == nil {
				return
			}
			var want []*auditlensv1.Finding
			for _, ev := range s.events {
				want = append(want, findingsOf(t, e, ev)...)
			}
			if len(got) != len(want) {
				t.Fatalf("%d findings in the envelope, %d unwrapped", len(got), len(want))
			}
			for i := range want {
				if !proto.Equal(got[i], want[i]) {
					t.Errorf("finding %d differs:\n got  %v\n want %v", i, got[i], want[i])
				}
			}
		})
	}
	const goldenFile = "testdata/envelope-findings.golden"
	if *update {
		if err := os.WriteFile(goldenFile, golden.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(goldenFile)
	if err != nil {
		t.Fatalf("%v (run go test -run TestEnvelopeFindings -update)", err)
	}
	if !bytes.Equal(want, golden.Bytes()) {
		t.Errorf("envelope findings differ from %s (review, then -update):\n%s", goldenFile, golden.String())
	}
	if total < 10 {
		t.Fatalf("only %d findings over all samples", total)
	}
}
