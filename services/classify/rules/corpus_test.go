package rules

import (
	"bufio"
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/auditlens/auditlens/lib/auditevent"
)

var update = flag.Bool("update", false, "rewrite testdata/corpus-findings.golden")

// corpusDir is the real-world corpus kept beside the decoder (a copy of shared/testdata/real-world).
const corpusDir = "../../../lib/auditevent/testdata/real-world"

// TestCorpus classifies every real-world event: none may fail to decode, and the findings
// (file:line rule) must be exactly those in testdata/corpus-findings.golden, which says what
// each file should produce. The v1.37.2 baseline (ordinary kubectl use and the apiserver's
// loopback traffic) must produce none but the skew of the kubectl it was driven with.
func TestCorpus(t *testing.T) {
	e := mustEngine(t)
	files, err := filepath.Glob(filepath.Join(corpusDir, "*.jsonl"))
	if err != nil || len(files) < 12 {
		t.Fatalf("corpus in %s: %d files, %v", corpusDir, len(files), err)
	}
	var out bytes.Buffer
	events := 0
	d := auditevent.NewDecoder(4 << 20)
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(bytes.NewReader(b))
		sc.Buffer(nil, 8<<20)
		for n := 1; sc.Scan(); n++ {
			if len(bytes.TrimSpace(sc.Bytes())) == 0 {
				continue
			}
			err := d.Decode(sc.Bytes(), func(ev *auditevent.Event) error {
				events++
				for _, m := range e.Classify(ev, nil) {
					fd := e.Finding(ev, &m, "corpus", "")
					fmt.Fprintf(&out, "%s:%d %s %s%s %s removed_in=%s user=%s\n", filepath.Base(f), n, fd.RuleId,
						strings.TrimPrefix(fd.ApiGroup+"/", "/"), fd.ApiVersion, fd.Resource, fd.RemovedIn, fd.Username)
					// Its one finding is true: kubectl 1.32.4 against kube-apiserver 1.37 is
					// outside the version-skew policy (kubectl within one minor release).
					if strings.HasPrefix(filepath.Base(f), "kube-apiserver-1.37-baseline") &&
						(fd.RuleId != KubectlVersionSkew || !strings.Contains(fd.Message, "kubectl 1.32.4, which the version-skew policy supports against kube-apiserver 1.31 to 1.33")) {
						t.Errorf("baseline noise %s:%d produced %s: %s", filepath.Base(f), n, fd.RuleId, fd.Message)
					}
				}
				return nil
			})
			if err != nil {
				t.Errorf("%s:%d: parse error: %v", filepath.Base(f), n, err)
			}
		}
	}
	if events < 790 {
		t.Fatalf("classified %d events, want the whole corpus", events)
	}
	const golden = "testdata/corpus-findings.golden"
	if *update {
		if err := os.WriteFile(golden, out.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run go test -run TestCorpus -update)", err)
	}
	if !bytes.Equal(want, out.Bytes()) {
		t.Errorf("corpus findings differ from %s (review, then go test -run TestCorpus -update):\ngot:\n%s", golden, out.String())
	}
	t.Logf("%d events, %d findings", events, bytes.Count(out.Bytes(), []byte("\n")))
}
