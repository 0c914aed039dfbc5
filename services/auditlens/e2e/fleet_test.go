package e2e

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
)

// A simulated fleet: one audit log per cluster, built from the genuine events of
// lib/auditevent/testdata/real-world (a copy of the shared real-world corpus: Kubernetes 1.14 to
// 1.37, v1 and v1beta1) with their auditIDs rewritten, so that every cluster holds distinct
// requests with real shapes. The expected findings of each cluster are what classify scan finds
// in that cluster's log.

// corpusDir holds the real-world audit events the fleet is built from.
const corpusDir = "../../../lib/auditevent/testdata/real-world"

// mix says what one copy of the corpus in a cluster's log holds: the whole corpus Plain times
// (about 1 finding in 90 events: most of a real log is harmless) and the events whose requests
// yield findings Findings times (about one finding per event: the load on report).
type mix struct{ Plain, Findings int }

// fleet is the input of a fleet run.
type fleet struct {
	Clusters []string
	Logs     map[string]string          // cluster -> its generated audit log
	Lines    map[string]int             // cluster -> events in its log
	Want     map[string]map[string]bool // cluster -> "audit_id rule_id" that classify scan finds
}

// Events is the number of events in every log.
func (f *fleet) Events() int {
	n := 0
	for _, l := range f.Lines {
		n += l
	}
	return n
}

// Findings is the number of findings classify scan finds in every log.
func (f *fleet) Findings() int {
	n := 0
	for _, w := range f.Want {
		n += len(w)
	}
	return n
}

// corpusLine is one event of the corpus: its bytes and where its auditID value ends.
type corpusLine struct {
	data    []byte
	idEnd   int // index of the closing quote of the auditID value
	auditID string
}

// readCorpus reads every event of the corpus, each with exactly one auditID.
func readCorpus(tb testing.TB) []corpusLine {
	tb.Helper()
	files, err := filepath.Glob(filepath.Join(corpusDir, "*.jsonl"))
	if err != nil || len(files) == 0 {
		tb.Fatalf("no corpus in %s (%v)", corpusDir, err)
	}
	sort.Strings(files)
	key := []byte(`"auditID":"`)
	var out []corpusLine
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			tb.Fatal(err)
		}
		for _, line := range bytes.Split(bytes.TrimSpace(b), []byte("\n")) {
			if bytes.Count(line, key) != 1 {
				tb.Fatalf("%s: an event with %d auditID fields (the rewrite needs one): %.100s", f, bytes.Count(line, key), line)
			}
			start := bytes.Index(line, key) + len(key)
			end := start + bytes.IndexByte(line[start:], '"')
			out = append(out, corpusLine{data: line, idEnd: end, auditID: string(line[start:end])})
		}
	}
	return out
}

// findingLines is the part of corpus whose requests yield findings (every stage of them, so
// that classify's de-duplication across stages sees what it sees in the corpus).
func findingLines(tb testing.TB, dir string, corpus []corpusLine) []corpusLine {
	tb.Helper()
	all := filepath.Join(dir, "corpus.log")
	var b bytes.Buffer
	for _, l := range corpus {
		b.Write(l.data)
		b.WriteByte('\n')
	}
	if err := os.WriteFile(all, b.Bytes(), 0o644); err != nil {
		tb.Fatal(err)
	}
	ids := map[string]bool{}
	for k := range scanKeys(tb, all) {
		id, _, _ := strings.Cut(k, " ")
		ids[id] = true
	}
	var out []corpusLine
	for _, l := range corpus {
		if ids[l.auditID] {
			out = append(out, l)
		}
	}
	if len(out) == 0 {
		tb.Fatal("no event of the corpus yields a finding")
	}
	return out
}

// writeFleet writes clusters logs into dir holding about events events in all, in the
// proportions 1:2:3:4 (cluster i gets weight 1+i%4, so that no two neighbours hold the same
// count), and returns them with the findings classify scan finds in each.
func writeFleet(tb testing.TB, dir string, clusters, events int, m mix) *fleet {
	tb.Helper()
	corpus := readCorpus(tb)
	var withFindings []corpusLine
	if m.Findings > 0 {
		withFindings = findingLines(tb, dir, corpus)
	}
	perCopy := m.Plain*len(corpus) + m.Findings*len(withFindings)
	weights := 0
	for i := range clusters {
		weights += 1 + i%4
	}
	f := &fleet{Logs: map[string]string{}, Lines: map[string]int{}, Want: map[string]map[string]bool{}}
	for i := range clusters {
		name := fmt.Sprintf("fleet-%02d", i+1)
		f.Clusters = append(f.Clusters, name)
		copies := max(1, (events*(1+i%4)+weights*perCopy-1)/(weights*perCopy))
		path := filepath.Join(dir, name+".log")
		n, err := writeClusterLog(path, name, copies, corpus, withFindings, m)
		if err != nil {
			tb.Fatal(err)
		}
		f.Logs[name], f.Lines[name] = path, n
	}
	// classify scan of each log, two at a time.
	var mu sync.Mutex
	var wg sync.WaitGroup
	sem := make(chan struct{}, 2)
	for _, c := range f.Clusters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			keys := scanKeys(tb, f.Logs[c])
			mu.Lock()
			f.Want[c] = keys
			mu.Unlock()
		}()
	}
	wg.Wait()
	return f
}

// writeClusterLog writes copies of the mix for cluster to path: the auditID of copy c of a
// block b of the mix becomes "<auditID>-<cluster>-<c>.<b>" (every stage of one request keeps
// one id). It returns the number of events written.
func writeClusterLog(path, cluster string, copies int, corpus, withFindings []corpusLine, m mix) (int, error) {
	out, err := os.Create(path)
	if err != nil {
		return 0, err
	}
	w := bufio.NewWriterSize(out, 1<<20)
	n := 0
	for c := range copies {
		var blocks [][]corpusLine
		for range m.Plain {
			blocks = append(blocks, corpus)
		}
		for range m.Findings {
			blocks = append(blocks, withFindings)
		}
		for b, lines := range blocks {
			suffix := fmt.Sprintf("-%s-%d.%d", cluster, c, b)
			for _, l := range lines {
				_, _ = w.Write(l.data[:l.idEnd]) // a failed write shows in Flush
				_, _ = w.WriteString(suffix)
				_, _ = w.Write(l.data[l.idEnd:])
				_ = w.WriteByte('\n')
				n++
			}
		}
	}
	if err := w.Flush(); err != nil {
		_ = out.Close()
		return 0, fmt.Errorf("write %s: %w", path, err)
	}
	return n, out.Close()
}

// scanKeys runs classify scan on path: the "audit_id rule_id" of every finding.
func scanKeys(tb testing.TB, path string) map[string]bool {
	cmd := exec.Command(filepath.Join(bin, "classify"), "scan", "--format", "json", path)
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	if err != nil && (!errors.As(err, &ee) || ee.ExitCode() == 1) {
		tb.Errorf("classify scan %s: %v\n%s", path, err, stderr.String())
		return nil
	}
	keys := map[string]bool{}
	sc := bufio.NewScanner(&out)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var f struct {
			AuditID string `json:"audit_id"`
			RuleID  string `json:"rule_id"`
		}
		if err := json.Unmarshal(sc.Bytes(), &f); err != nil {
			tb.Errorf("classify scan %s: %q: %v", path, sc.Text(), err)
			return nil
		}
		keys[f.AuditID+" "+f.RuleID] = true
	}
	return keys
}

// identities is the sorted "cluster/audit_id/rule_id" of every finding of f, as
// chtest.Cluster.ShardIdentities lists a shard's.
func (f *fleet) identities() []string {
	var out []string
	for c, keys := range f.Want {
		for k := range keys {
			out = append(out, c+"/"+strings.Replace(k, " ", "/", 1))
		}
	}
	slices.Sort(out)
	return out
}
