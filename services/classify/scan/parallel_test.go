package scan

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/auditlens/auditlens/lib/auditevent"
	"github.com/auditlens/auditlens/lib/envelope/envelopetest"
)

// realEvents are the genuine audit events of the real-world corpus and examples/audit.log
// that name an audit id, one JSON line each.
func realEvents(tb testing.TB) [][]byte {
	tb.Helper()
	var out [][]byte
	for _, f := range inputsOf(tb) {
		data, err := os.ReadFile(f)
		if err != nil {
			tb.Fatal(err)
		}
		for _, l := range bytes.Split(data, []byte{'\n'}) {
			if ref, err := auditevent.Peek(l, 0); err == nil && ref.AuditID != "" {
				out = append(out, l)
			}
		}
	}
	if len(out) < 900 {
		tb.Fatalf("%d real events", len(out))
	}
	return out
}

// derive returns ev with its audit id made unique by the suffix "-n" and, when stage is set,
// logged at that stage.
func derive(ev []byte, n int, stage string) []byte {
	ref, _ := auditevent.Peek(ev, 0) // checked by realEvents
	out := bytes.Replace(ev, []byte(`"auditID":"`+ref.AuditID+`"`), fmt.Appendf(nil, `"auditID":"%s-%d"`, ref.AuditID, n), 1)
	if stage != "" {
		out = bytes.Replace(out, []byte(`"stage":"`+ref.Stage+`"`), []byte(`"stage":"`+stage+`"`), 1)
	}
	return out
}

// withFindings are the events of realEvents that give a finding, with others in between.
func withFindings(t *testing.T) [][]byte {
	ev := realEvents(t)
	_, out, _ := run(t, "", append([]string{"--parallel", "1", "--dedup-window", "0"}, inputsOf(t)...)...)
	ids := map[string]bool{}
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		var f JSONFinding
		if err := json.Unmarshal([]byte(l), &f); err != nil {
			t.Fatalf("%v: %s", err, l)
		}
		ids[f.AuditID] = true
	}
	var mixed [][]byte
	for i, e := range ev {
		if ref, _ := auditevent.Peek(e, 0); ids[ref.AuditID] {
			mixed = append(mixed, e, ev[(i*7)%len(ev)])
		}
	}
	if len(mixed) < 20 {
		t.Fatalf("%d events with findings", len(mixed)/2)
	}
	return mixed
}

// inputsOf are the files realEvents reads.
func inputsOf(t testing.TB) []string {
	files, _ := filepath.Glob(filepath.Join(corpus, "*.jsonl"))
	return append(files, "../../../examples/audit.log")
}

// stagedLog is n requests of the events ev, each logged at RequestReceived and, after the
// next request's first line, at ResponseComplete, as an apiserver interleaves them: the lines
// and, for each request, the numbers (from 0) of its two lines.
func stagedLog(ev [][]byte, n int) (lines [][]byte, pairs [][2]int) {
	pairs = make([][2]int, n)
	for i := range n {
		pairs[i][0] = len(lines)
		lines = append(lines, derive(ev[i%len(ev)], i, "RequestReceived"))
		if i > 0 {
			pairs[i-1][1] = len(lines)
			lines = append(lines, derive(ev[(i-1)%len(ev)], i-1, "ResponseComplete"))
		}
	}
	pairs[n-1][1] = len(lines)
	lines = append(lines, derive(ev[(n-1)%len(ev)], n-1, "ResponseComplete"))
	return lines, pairs
}

var took = regexp.MustCompile(`\((\d+h)?(\d+m)?[\d.]+(µs|ms|s)\)`)

// sameAsSequential runs scan with args at --parallel 1 and at several other values, and
// fails unless the exit code, stdout and stderr (but for the time taken) are the same.
func sameAsSequential(t *testing.T, stdin string, args ...string) (out, errOut string) {
	t.Helper()
	code, out, errOut := run(t, stdin, append([]string{"--parallel", "1", "--progress", "never"}, args...)...)
	for _, n := range []string{"2", "5"} {
		c, o, e := run(t, stdin, append([]string{"--parallel", n, "--progress", "never"}, args...)...)
		if c != code {
			t.Errorf("%v --parallel %s: exit %d, sequential %d", args, n, c, code)
		}
		for _, d := range []struct{ name, seq, par string }{{"stdout", out, o}, {"stderr", errOut, e}} {
			seq, par := took.ReplaceAllString(d.seq, "(T)"), took.ReplaceAllString(d.par, "(T)")
			if seq != par {
				t.Errorf("%v --parallel %s: %s differs from the sequential one at line %s", args, n, d.name, firstDiff(seq, par))
			}
		}
	}
	return out, errOut
}

func firstDiff(a, b string) string {
	al, bl := strings.Split(a, "\n"), strings.Split(b, "\n")
	for i := range max(len(al), len(bl)) {
		if i >= len(al) || i >= len(bl) || al[i] != bl[i] {
			get := func(l []string) string {
				if i < len(l) {
					return l[i]
				}
				return "(none)"
			}
			return fmt.Sprintf("%d of %d and %d:\n  %.300s\n  %.300s", i+1, len(al), len(bl), get(al), get(bl))
		}
	}
	return "(none)"
}

// smallChunks cuts inputs into chunks of about n bytes for the rest of the test.
func smallChunks(t *testing.T, n int) {
	was := chunkBytes
	chunkBytes = n
	t.Cleanup(func() { chunkBytes = was })
}

func TestParallelOnTheRealWorldCorpus(t *testing.T) {
	smallChunks(t, 16<<10)
	files := inputsOf(t)
	for _, args := range [][]string{
		{"--format", "json"}, {"--format", "table"}, {"--format", "wide"}, {"--format", "markdown"},
		{"--format", "table", "--group-by", "caller"}, {"--target-version", "1.25"},
		{"--format", "sarif"}, {"--format", "junit", "--target-version", "1.25"},
	} {
		out, _ := sameAsSequential(t, "", append(args, files...)...)
		if !strings.Contains(out, "removed-api") {
			t.Errorf("%v: no findings:\n%s", args, out)
		}
	}
}

// The two stages of one request, de-duplicated into one finding, often fall into two chunks
// classified by different workers: the findings are still those of the sequential scan,
// for a plain file, its gzip and stdin, and in every format.
func TestParallelAcrossChunkBoundaries(t *testing.T) {
	const chunk = 32 << 10
	smallChunks(t, chunk)
	lines, pairs := stagedLog(withFindings(t), 2000)
	log := string(bytes.Join(lines, []byte{'\n'})) + "\n"
	path := write(t, "audit.log", log)

	out, errOut := sameAsSequential(t, "", path)
	// The requests with findings whose two lines are in different chunks (the reader cuts
	// a chunk after the line that takes it to chunkBytes).
	var end []int // end[i]: the chunk of line i
	size, c := 0, 0
	for _, l := range lines {
		end = append(end, c)
		if size += len(l); size >= chunk {
			size, c = 0, c+1
		}
	}
	found := map[string]bool{}
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		var f JSONFinding
		if err := json.Unmarshal([]byte(l), &f); err != nil {
			t.Fatalf("%v: %s", err, l)
		}
		found[f.AuditID] = true
	}
	split := 0
	for _, p := range pairs {
		ref, _ := auditevent.Peek(lines[p[0]], 0)
		if end[p[0]] != end[p[1]] && found[ref.AuditID] {
			split++
		}
	}
	if split < 10 || len(found) < 100 {
		t.Fatalf("%d requests with findings split across chunks, %d with findings: the test does not test", split, len(found))
	}
	t.Logf("%d of %d requests with findings have their two stages in two chunks", split, len(found))
	if events, findings, _ := scanSummary(t, errOut); events != "4000" || strings.Count(out, "\n") > len(found)*2 {
		t.Errorf("events %s, findings %s (%d lines) for %d requests with findings", events, findings, strings.Count(out, "\n"), len(found))
	}

	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	_, _ = zw.Write([]byte(log))
	zw.Close()
	gzOut, _ := sameAsSequential(t, "", write(t, "audit.log.1.gz", gz.String()))
	if gzOut != out {
		t.Errorf("the gzip input gives other findings")
	}
	sameAsSequential(t, log, "--format", "table", "-")
	sameAsSequential(t, "", "--format", "markdown", "--group-by", "caller", path, path)
	// The file and line of each caller's first request, whichever chunk it is in.
	if out, _ := sameAsSequential(t, "", "--format", "sarif", path); !strings.Contains(out, `"startLine": `) {
		t.Errorf("no lines in the SARIF log:\n%s", out)
	}
	sameAsSequential(t, "", "--format", "junit", path)
}

// Bad lines are reported in input order, and only the first --max-bad-reports, whichever
// worker read them; a line over the size cap, an EventList with bad items, a file that
// cannot be read and a directory among the inputs are reported where they are.
func TestParallelBadLinesAndInputs(t *testing.T) {
	smallChunks(t, 4<<10)
	ev := realEvents(t)
	item := strings.TrimPrefix(string(ev[0]), `{"kind":"Event","apiVersion":"audit.k8s.io/v1",`)
	var b strings.Builder
	for i := range 400 {
		switch i % 9 {
		case 3:
			fmt.Fprintf(&b, "not json %d\n", i)
		case 5:
			b.WriteString(`{"kind":"EventList","apiVersion":"audit.k8s.io/v1","items":[{` + item + `,{"no":"event"}]}` + "\n")
		case 7:
			b.WriteString(`{"auditID":"h","requestObject":"` + strings.Repeat("x", 5000) + "\"}\n\n")
		default:
			b.Write(derive(ev[i%len(ev)], i, ""))
			b.WriteString("\n")
		}
	}
	bad := write(t, "bad.log", b.String())
	good := write(t, "good.log", string(bytes.Join(ev[:50], []byte{'\n'})))
	for _, args := range [][]string{
		{bad},
		{"--max-bad-reports", "0", bad},
		{"--max-bad-reports", "1000", "--max-event-size", "4096", bad},
		{good, "/no/such/audit.log", bad, t.TempDir(), good},
	} {
		_, errOut := sameAsSequential(t, "", args...)
		if !strings.Contains(errOut, "bad.log:") && !strings.Contains(strings.Join(args, " "), "--max-bad-reports 0") {
			t.Errorf("%v: no bad line reported:\n%s", args, errOut)
		}
	}
}

// Cloud envelopes, pretty-printed documents read whole and gzip Firehose objects: each input
// gives what it gives sequentially, in the same order.
func TestParallelEnvelopesAndDocuments(t *testing.T) {
	smallChunks(t, 4<<10)
	samples, _ := filepath.Glob(filepath.Join(managedSamples, "*.json*"))
	if len(samples) < 8 {
		t.Fatalf("%d samples", len(samples))
	}
	ev := realEvents(t)
	inputs := samples
	for _, sh := range envelopetest.Shapes(ev[:40]) {
		inputs = append(inputs, write(t, sh.Name, string(sh.Data)))
	}
	_, errOut := sameAsSequential(t, "", inputs...)
	if events, _, _ := scanSummary(t, errOut); events == "0" {
		t.Fatalf("no events:\n%s", errOut)
	}
}

// However long the input, at most 2n+2 chunks are in memory with n workers.
func TestParallelChunksInMemoryAreBounded(t *testing.T) {
	smallChunks(t, 4<<10)
	lines, _ := stagedLog(realEvents(t), 2000) // about 2 MB: 500 chunks
	path := write(t, "audit.log", string(bytes.Join(lines, []byte{'\n'})))
	for _, n := range []int{2, 4} {
		var out, errOut bytes.Buffer
		s, files, _ := newScanner([]string{"--parallel", fmt.Sprint(n), "--progress", "never", path}, &out, &errOut)
		if code := s.run(files, nil); code == ExitError {
			t.Fatalf("exit %d: %s", code, errOut.String())
		}
		if peak := s.peakChunks.Load(); peak > int64(2*n+2) || peak < 2 {
			t.Errorf("--parallel %d: %d chunks in memory at once, want at most %d", n, peak, 2*n+2)
		}
		if s.chunks.Load() != 0 {
			t.Errorf("--parallel %d: %d chunks not freed", n, s.chunks.Load())
		}
	}
}
