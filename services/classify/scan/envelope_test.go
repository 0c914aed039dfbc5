package scan

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/auditlens/auditlens/lib/envelope/envelopetest"
)

const managedSamples = "../../../lib/envelope/testdata/managed"

func readSample(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(managedSamples, name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

var summaryRE = regexp.MustCompile(`(\d+) events? in \d+ inputs?, (\d+) findings?.*, (\d+) bad lines? skipped`)

func scanSummary(t *testing.T, stderr string) (events, findings, bad string) {
	t.Helper()
	m := summaryRE.FindStringSubmatch(stderr)
	if m == nil {
		t.Fatalf("no summary in:\n%s", stderr)
	}
	return m[1], m[2], m[3]
}

// TestManagedEnvelopesMixedInOneFile: one file mixing plain events, AKS records (Event Hubs
// body and bare), GKE entries, a BUILT EKS subscription payload (no genuine one is public)
// and export lines gives every audit event once, skips the records that hold none (counted
// in the summary), and each finding names its envelope.
func TestManagedEnvelopesMixedInOneFile(t *testing.T) {
	plain, err := os.ReadFile(filepath.Join(corpus, "k8s-perf-tests-gce-scale.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(plain)), "\n")
	var mixed strings.Builder
	mixed.WriteString(removedEv + "\n")
	mixed.WriteString(strings.ReplaceAll(readSample(t, "aks-eventhub-records-sysdiglabs.json"), "\n", "") + "\n") // 22 events
	mixed.WriteString(readSample(t, "aks-diagnostic-record-dynatrace.jsonl"))                                     // 1 event, 1 klog record
	mixed.WriteString(readSample(t, "gke-logentry-elastic.jsonl"))                                                // 9 entries
	mixed.Write(envelopetest.Subscription([][]byte{[]byte(lines[0]), []byte(lines[1])}))                          // 2 events
	mixed.WriteString("\n")
	mixed.Write(envelopetest.Control()) // skipped
	mixed.WriteString("\n2026-11-30T12:00:00.000Z " + deprecatedEv + "\n")
	mixed.WriteString("not an audit event\n")
	code, out, errOut := run(t, "", "--progress", "never", write(t, "mixed.log", mixed.String()))
	events, findings, bad := scanSummary(t, errOut)
	if events != "36" || bad != "1" || code != ExitRemoved {
		t.Fatalf("events %s, bad %s, exit %d; want 36 events, 1 bad line, exit 3\n%s", events, bad, code, errOut)
	}
	for _, want := range []string{"cloudwatch control_message: 1", "azure category kube-controller-manager: 1"} {
		if !strings.Contains(errOut, want) {
			t.Errorf("summary lacks %q:\n%s", want, errOut)
		}
	}
	vias := map[string]int{}
	n := 0
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		var f struct {
			Evidence []struct{ Path, Value string } `json:"evidence"`
		}
		if err := json.Unmarshal([]byte(l), &f); err != nil {
			t.Fatalf("%v: %s", err, l)
		}
		n++
		for _, e := range f.Evidence {
			if strings.Contains(e.Path, "auditlens.io/envelope") {
				vias[e.Value]++
			}
		}
	}
	// 15 API and token findings and 5 of the version-skew rules (the two gce-scale kubelets
	// 1.14, AKS's and GKE's kubectl users: one finding per caller, release and day).
	if findings != "20" || n != 20 {
		t.Fatalf("%s findings, %d lines, want 20", findings, n)
	}
	want := map[string]int{"aks/diagnostic-records": 7, "aks/diagnostic-record": 2, "gke/logentry": 5, "eks/cloudwatch-subscription": 4, "eks/cloudwatch-export": 1}
	for k, v := range want {
		if vias[k] != v {
			t.Errorf("findings via %s: %d, want %d (all: %v)", k, vias[k], v, vias)
		}
	}
}

// TestManagedDocumentsAndGzip: pretty-printed documents (aws logs filter-log-events output,
// gcloud logging read --format=json) are read whole; a Firehose S3 object (gzip, records
// back to back) is read as gzip. The EKS envelopes are BUILT around genuine events.
func TestManagedDocumentsAndGzip(t *testing.T) {
	plain, err := os.ReadFile(filepath.Join(corpus, "k8s-perf-tests-gce-scale.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	var events [][]byte
	for _, l := range strings.Split(strings.TrimSpace(string(plain)), "\n") {
		events = append(events, []byte(l))
	}
	var gcloud []json.RawMessage
	for _, l := range strings.Split(strings.TrimSpace(readSample(t, "gke-logentry-elastic.jsonl")), "\n") {
		gcloud = append(gcloud, json.RawMessage(l))
	}
	gdoc, _ := json.MarshalIndent(gcloud, "", "  ")
	files := map[string]struct {
		data   []byte
		events string
	}{
		"gcloud.json": {gdoc, "9"},
	}
	for _, sh := range envelopetest.Shapes(events) {
		files[sh.Name] = struct {
			data   []byte
			events string
		}{sh.Data, strconv.Itoa(len(events))}
	}
	for name, f := range files {
		t.Run(name, func(t *testing.T) {
			data := f.data
			if strings.HasSuffix(name, ".json") && !bytes.Contains(data, []byte("\n ")) {
				data = append(data, '\n') // one-line documents stay one line
			}
			_, _, errOut := run(t, "", "--progress", "never", write(t, name, string(data)))
			events, _, bad := scanSummary(t, errOut)
			if events != f.events || bad != "0" {
				t.Fatalf("events %s, bad %s; want %s, 0\n%s", events, bad, f.events, errOut)
			}
		})
	}
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	if _, err := zw.Write([]byte(readSample(t, "aks-diagnostic-record-sumologic-docs.jsonl"))); err != nil {
		t.Fatal(err)
	}
	zw.Close()
	_, _, errOut := run(t, "", "--progress", "never", write(t, "aks.jsonl.gz", gz.String()))
	if events, _, bad := scanSummary(t, errOut); events != "2" || bad != "0" {
		t.Fatalf("gzip AKS lines: events %s, bad %s\n%s", events, bad, errOut)
	}
}
