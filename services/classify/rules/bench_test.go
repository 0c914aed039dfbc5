package rules

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"

	"github.com/auditlens/auditlens/lib/auditevent"
)

const benchDir = "../../../lib/auditevent/testdata/bench/"

// BenchmarkClassify measures single-core events/s of the whole hot path (decode, every rule,
// the finding when one fires) beside the plain encoding/json decode into auditv1.Event, the
// baseline, on the same inputs in the same run. Run with -cpu 1.
func BenchmarkClassify(b *testing.B) {
	meta, err := os.ReadFile(benchDir + "metadata-1.2k.json")
	if err != nil {
		b.Fatal(err)
	}
	rr, err := os.ReadFile(benchDir + "requestresponse-8k.json")
	if err != nil {
		b.Fatal(err)
	}
	meta, rr = bytes.TrimSpace(meta), bytes.TrimSpace(rr)
	// The same Metadata event calling a removed API: a finding is built every time.
	removed := bytes.Replace(meta, []byte(`"apiVersion":"v1"}`), []byte(`"apiVersion":"v1beta1"}`), 1)
	if !bytes.Contains(removed, []byte("v1beta1")) {
		b.Fatal("could not derive the removed-API input")
	}
	e := mustEngine(b)
	for _, in := range []struct {
		name     string
		data     []byte
		findings int
	}{
		{"metadata-1.2KB", meta, 0},
		{"requestresponse-8KB", rr, 0},
		{"metadata-1.2KB-with-finding", removed, 1},
	} {
		b.Run(in.name+"/auditlens", func(b *testing.B) {
			defer reportCPU(b)()
			d := auditevent.NewDecoder(4 << 20)
			var matches []Match
			b.SetBytes(int64(len(in.data)))
			b.ReportAllocs()
			for b.Loop() {
				ev, err := d.DecodeEvent(in.data)
				if err != nil {
					b.Fatal(err)
				}
				matches = e.Classify(ev, matches[:0])
				if len(matches) != in.findings {
					b.Fatalf("%d matches, want %d", len(matches), in.findings)
				}
				for i := range matches {
					if f := e.Finding(ev, &matches[i], "bench", ""); f.Message == "" {
						b.Fatal("no message")
					}
				}
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
		})
		b.Run(in.name+"/encoding-json", func(b *testing.B) {
			defer reportCPU(b)()
			b.SetBytes(int64(len(in.data)))
			b.ReportAllocs()
			for b.Loop() {
				var ev auditv1.Event
				if err := json.Unmarshal(in.data, &ev); err != nil || ev.AuditID == "" {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
		})
	}
}

// reportCPU locks the benchmark to its OS thread and, when it returns, reports the thread's
// CPU time per event and the events/s that makes ("cpu-events/s"): single-core throughput
// that other processes on the machine do not distort. Garbage collection done on other
// threads (encoding/json allocates, auditlens does not) is not included.
func reportCPU(b *testing.B) func() {
	runtime.LockOSThread()
	start, ok := threadCPU()
	return func() {
		defer runtime.UnlockOSThread()
		end, _ := threadCPU()
		if !ok || b.N == 0 || end <= start {
			return
		}
		per := float64(end-start) / float64(b.N)
		b.ReportMetric(per, "cpu-ns/op")
		b.ReportMetric(1e9/per, "cpu-events/s")
	}
}

func TestBenchInputsAreWhatTheyClaim(t *testing.T) {
	for name, want := range map[string][2]int{"metadata-1.2k.json": {1100, 1300}, "requestresponse-8k.json": {7600, 8600}} {
		b, err := os.ReadFile(benchDir + name)
		if err != nil {
			t.Fatal(err)
		}
		if len(b) < want[0] || len(b) > want[1] {
			t.Errorf("%s is %d bytes", name, len(b))
		}
		level := map[bool]string{true: "Metadata", false: "RequestResponse"}[strings.HasPrefix(name, "metadata")]
		if !bytes.Contains(b, []byte(`"level":"`+level+`"`)) {
			t.Errorf("%s is not a %s event", name, level)
		}
	}
}

// BenchmarkLoad measures loading the embedded catalogue and preparing its engine: what every
// `classify scan` pays once before its first event.
func BenchmarkLoad(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		c, err := Load()
		if err != nil {
			b.Fatal(err)
		}
		NewEngine(c)
	}
}

// BenchmarkFamilies measures what the rule families beyond API versions (skew, runtimes, bodies,
// drains, webhooks) cost: the genuine corpus and the 1.37 families log classified by the
// catalogue without them ("before", the rules and rows switched off) and with them, in the
// same run. As classify scan does, a finding is built only for a key not seen before (the
// stages of one request, a caller's sightings of the day). Compare the two events/s
// (benchstat, or the ratio): the scan may lose at most 10%.
func BenchmarkFamilies(b *testing.B) {
	var lines [][]byte
	files, _ := filepath.Glob(corpusDir + "/*.jsonl")
	files = append(files, "testdata/families-1.37.log")
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			b.Fatal(err)
		}
		for _, l := range bytes.Split(data, []byte("\n")) {
			if len(bytes.TrimSpace(l)) > 0 {
				lines = append(lines, l)
			}
		}
	}
	before, err := Load()
	if err != nil {
		b.Fatal(err)
	}
	for i := range before.Rules {
		switch before.Rules[i].Family {
		case "version-skew", "drain", "webhook":
			before.Rules[i].Disabled = true
		}
		switch before.Rules[i].ID {
		case NodeContainerRuntime, GitRepoVolume, ServiceExternalIPs, ServicePreferClose, IngressNginx,
			StrictIPCIDR, WindowsHostNetwork, NodeCgroupV1, KubeProxyIPVS:
			before.Rules[i].Disabled = true
		}
	}
	before.VersionSkew, before.Runtimes = nil, nil
	for _, c := range []struct {
		name string
		e    *Engine
	}{{"before", NewEngine(before)}, {"with-families", mustEngine(b)}} {
		b.Run(c.name, func(b *testing.B) {
			defer reportCPU(b)()
			d := auditevent.NewDecoder(4 << 20)
			var matches []Match
			events := 0
			for b.Loop() {
				seen := map[string]bool{}
				for _, l := range lines {
					_ = d.Decode(l, func(ev *auditevent.Event) error {
						events++
						matches = c.e.Classify(ev, matches[:0])
						for i := range matches {
							if k := matches[i].AuditID(ev.AuditID) + "/" + matches[i].Rule.ID; !seen[k] {
								seen[k] = true
								c.e.Finding(ev, &matches[i], "bench", "")
							}
						}
						return nil
					})
				}
			}
			b.ReportMetric(float64(events)/b.Elapsed().Seconds(), "events/s")
		})
	}
}
