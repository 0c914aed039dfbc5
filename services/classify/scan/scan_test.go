package scan

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/auditlens/auditlens/lib/kubeversion"
)

const corpus = "../../../lib/auditevent/testdata/real-world"

func run(t *testing.T, stdin string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var o, e bytes.Buffer
	code = Main(args, strings.NewReader(stdin), &o, &e)
	return code, o.String(), e.String()
}

func write(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

const (
	removedEv    = `{"kind":"Event","apiVersion":"audit.k8s.io/v1","level":"Metadata","auditID":"a1","stage":"ResponseComplete","requestURI":"/apis/policy/v1beta1/namespaces/x/poddisruptionbudgets","verb":"list","user":{"username":"ci-bot"},"userAgent":"helm/v3.8.0","objectRef":{"resource":"poddisruptionbudgets","namespace":"x","apiGroup":"policy","apiVersion":"v1beta1"},"responseStatus":{"code":404},"requestReceivedTimestamp":"2026-11-29T10:00:00.000000Z","stageTimestamp":"2026-11-29T10:00:00.000100Z"}`
	deprecatedEv = `{"kind":"Event","apiVersion":"audit.k8s.io/v1","level":"Metadata","auditID":"d1","stage":"ResponseComplete","requestURI":"/api/v1/endpoints","verb":"list","user":{"username":"old-proxy"},"objectRef":{"resource":"endpoints","apiVersion":"v1"},"responseStatus":{"code":200},"requestReceivedTimestamp":"2026-11-29T10:00:00.000000Z","stageTimestamp":"2026-11-29T10:00:00.000100Z","annotations":{"k8s.io/deprecated":"true"}}`
	cleanEv      = `{"kind":"Event","apiVersion":"audit.k8s.io/v1","level":"Metadata","auditID":"c1","stage":"ResponseComplete","requestURI":"/api/v1/pods","verb":"list","user":{"username":"admin"},"objectRef":{"resource":"pods","apiVersion":"v1"},"responseStatus":{"code":200},"requestReceivedTimestamp":"2026-11-29T10:00:00.000000Z","stageTimestamp":"2026-11-29T10:00:00.000100Z"}`
	podMetaEv    = `{"kind":"Event","apiVersion":"audit.k8s.io/v1","level":"Metadata","auditID":"p1","stage":"ResponseComplete","requestURI":"/api/v1/namespaces/x/pods","verb":"create","user":{"username":"admin"},"objectRef":{"resource":"pods","namespace":"x","apiVersion":"v1"},"responseStatus":{"code":201}}`
)

func TestExitCodes(t *testing.T) {
	for _, tc := range []struct {
		name  string
		lines []string
		args  []string
		want  int
	}{
		{"no findings", []string{cleanEv}, nil, ExitClean},
		{"only a deprecation", []string{deprecatedEv, cleanEv}, nil, ExitFindings},
		{"removed (no target: any removal)", []string{removedEv}, nil, ExitRemoved},
		{"removed before the target", []string{removedEv}, []string{"--target-version", "1.25"}, ExitRemoved},
		{"removed after the target", []string{removedEv}, []string{"--target-version", "1.24"}, ExitFindings},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := write(t, "audit.log", strings.Join(tc.lines, "\n")+"\n")
			code, out, errOut := run(t, "", append(tc.args, f)...)
			if code != tc.want {
				t.Fatalf("exit %d, want %d\nstdout:\n%s\nstderr:\n%s", code, tc.want, out, errOut)
			}
		})
	}
}

func TestUsageErrorsExitOne(t *testing.T) {
	for _, args := range [][]string{
		{},
		{"--format", "xml", "x"},
		{"--target-version", "one.two", "x"},
		{"/no/such/file.log"},
		{"--rules-file", "/no/such/rules.yaml", "x"},
	} {
		code, _, errOut := run(t, "", args...)
		if code != ExitError || !strings.Contains(errOut, "classify scan:") {
			t.Errorf("%v: exit %d, stderr %q", args, code, errOut)
		}
	}
}

func TestJSONLinesCarryTheContractFields(t *testing.T) {
	f := write(t, "audit.log", removedEv+"\n")
	code, out, errOut := run(t, "", "--target-version", "1.25", f)
	if code != ExitRemoved {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 1 {
		t.Fatalf("want one finding line, got %q", out)
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(lines[0]), &m); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"rule_id", "severity", "cluster", "audit_id", "event_time", "verb", "request_uri", "api_group", "api_version", "resource", "subresource", "namespace", "name", "username", "user_agent", "source_ip", "response_code", "deprecated_in", "removed_in", "replacement", "message", "evidence", "stage", "confidence"} {
		if _, ok := m[k]; !ok {
			t.Errorf("field %s missing from %s", k, lines[0])
		}
	}
	if m["rule_id"] != "removed-api" || m["removed_in"] != "1.25" || m["response_code"] != float64(404) || m["event_time"] != "2026-11-29T10:00:00Z" {
		t.Errorf("unexpected finding %s", lines[0])
	}
	// json: the summary is on stderr, stdout holds findings only.
	if !strings.Contains(errOut, "removed-api (critical): 1 finding") || !strings.Contains(errOut, "policy/v1beta1 poddisruptionbudgets: 1") ||
		!strings.Contains(errOut, "ci-bot  helm/v3.8.0") || !strings.Contains(errOut, "[blocks 1.25]") {
		t.Errorf("summary by rule, API and caller missing:\n%s", errOut)
	}
}

func TestStagesOfOneRequestGiveOneFinding(t *testing.T) {
	started := strings.Replace(removedEv, `"stage":"ResponseComplete"`, `"stage":"ResponseStarted"`, 1)
	received := strings.Replace(removedEv, `"stage":"ResponseComplete"`, `"stage":"RequestReceived"`, 1)
	f := write(t, "audit.log", received+"\n"+started+"\n"+removedEv+"\n")
	_, out, _ := run(t, "", f)
	if n := strings.Count(out, `"rule_id":"removed-api"`); n != 1 {
		t.Fatalf("%d findings for three stages of one request, want 1:\n%s", n, out)
	}
}

// A client may send its own Audit-ID, which the kube-apiserver keeps: two requests with one
// audit ID are two findings, told apart by their requestReceivedTimestamp, which the stages of
// one request share; an event without one keeps its audit ID alone as its identity (its
// stages' timestamps differ).
func TestReusedAuditIDIsTwoRequests(t *testing.T) {
	received := strings.Replace(removedEv, `"stage":"ResponseComplete"`, `"stage":"RequestReceived"`, 1)
	again := strings.ReplaceAll(removedEv, "2026-11-29T10:00:00", "2026-11-29T10:05:00")
	againReceived := strings.Replace(again, `"stage":"ResponseComplete"`, `"stage":"RequestReceived"`, 1)
	noReceipt := strings.Replace(removedEv, `"requestReceivedTimestamp":"2026-11-29T10:00:00.000000Z",`, "", 1)
	noReceipt = strings.Replace(noReceipt, `"auditID":"a1"`, `"auditID":"b1"`, 1)
	noReceiptLater := strings.Replace(noReceipt, "2026-11-29T10:00:00.000100Z", "2026-11-29T10:00:07.000100Z", 1)
	f := write(t, "audit.log", strings.Join([]string{received, removedEv, againReceived, again, noReceipt, noReceiptLater}, "\n")+"\n")
	for _, parallel := range []string{"1", "2"} {
		_, out, _ := run(t, "", "--parallel", parallel, f)
		if n := strings.Count(out, `"audit_id":"a1"`); n != 2 {
			t.Errorf("--parallel %s: %d findings for two requests sharing audit ID a1, want 2:\n%s", parallel, n, out)
		}
		if n := strings.Count(out, `"audit_id":"b1"`); n != 1 {
			t.Errorf("--parallel %s: %d findings for two stages of b1 without a receipt time, want 1:\n%s", parallel, n, out)
		}
		// Each line says which request it is; one without a receipt time says none.
		for _, want := range []string{`"request_received":"2026-11-29T10:00:00Z"`, `"request_received":"2026-11-29T10:05:00Z"`} {
			if n := strings.Count(out, want); n != 1 {
				t.Errorf("--parallel %s: %d lines with %s, want 1:\n%s", parallel, n, want, out)
			}
		}
		if n := strings.Count(out, `"request_received"`); n != 2 {
			t.Errorf("--parallel %s: %d lines with a request_received, want 2 (b1 has none):\n%s", parallel, n, out)
		}
	}
}

func TestTableFormatAndSummaryOnStdout(t *testing.T) {
	f := write(t, "audit.log", removedEv+"\n"+deprecatedEv+"\n")
	code, out, _ := run(t, "", "--format", "table", f)
	if code != ExitRemoved {
		t.Fatalf("exit %d", code)
	}
	for _, want := range []string{"SEVERITY", "RULE", "removed-api", "deprecated-api", "policy/v1beta1 poddisruptionbudgets", "x/", "deprecated-api (info): 1 finding"} {
		if !strings.Contains(out, want) {
			t.Errorf("table output lacks %q:\n%s", want, out)
		}
	}
}

func TestGzipStdinAndBadLinesWithPositions(t *testing.T) {
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	if _, err := zw.Write([]byte(cleanEv + "\n" + removedEv + "\n")); err != nil {
		t.Fatal(err)
	}
	zw.Close()
	gzFile := filepath.Join(t.TempDir(), "audit.log.1.gz")
	if err := os.WriteFile(gzFile, gz.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	item := "{" + strings.TrimPrefix(deprecatedEv, `{"kind":"Event","apiVersion":"audit.k8s.io/v1",`)
	huge := `{"auditID":"h","stage":"ResponseComplete","requestObject":"` + strings.Repeat("x", 5000) + `"}`
	stdin := strings.Join([]string{
		cleanEv,
		`not json at all`,
		"{\"auditID\":\"\xff\xfe\",\"stage\":\"x\"}",
		`{"kind":"Pod","apiVersion":"v1","metadata":{"name":"x"}}`,
		huge,
		``,
		`{"kind":"EventList","apiVersion":"audit.k8s.io/v1","items":[` + item + `,{"no":"event"}]}`,
	}, "\n")
	code, out, errOut := run(t, stdin, "--max-event-size", "4096", gzFile, "-")
	if code != ExitRemoved {
		t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
	}
	for _, want := range []string{
		"stdin:2: skipped: not JSON",
		"stdin:3: skipped: invalid UTF-8",
		"stdin:4: skipped: not an audit event",
		"stdin:5: skipped: event larger than the size cap",
		"stdin:7: skipped: item 1: not an audit event",
		"5 bad lines skipped",
	} {
		if !strings.Contains(errOut, want) {
			t.Errorf("stderr lacks %q:\n%s", want, errOut)
		}
	}
	if !strings.Contains(out, `"rule_id":"removed-api"`) || !strings.Contains(out, `"rule_id":"deprecated-api"`) {
		t.Errorf("findings from the gzip file and the EventList item missing:\n%s", out)
	}
}

func TestMetadataOnlyNote(t *testing.T) {
	nodeMetaEv := strings.NewReplacer(`"resource":"pods","namespace":"x"`, `"resource":"nodes"`, `"auditID":"p1"`, `"auditID":"n1"`).Replace(podMetaEv)
	f := write(t, "one.log", podMetaEv+"\n"+cleanEv+"\n")
	code, _, errOut := run(t, "", f)
	if code != ExitClean {
		t.Fatalf("exit %d", code)
	}
	if !strings.Contains(errOut, "note: 1 write was logged at Metadata level only (pods 1)") || !strings.Contains(errOut, "deploy/audit-policy.yaml") {
		t.Errorf("no Metadata-level note:\n%s", errOut)
	}
	// Counts stay right across many lines (the event's strings are reused line after line).
	lines := []string{podMetaEv, cleanEv, nodeMetaEv, podMetaEv, deprecatedEv, nodeMetaEv, podMetaEv, cleanEv}
	f = write(t, "many.log", strings.Join(lines, "\n")+"\n")
	_, _, errOut = run(t, "", f)
	if !strings.Contains(errOut, "note: 5 writes were logged at Metadata level only (nodes 2, pods 3)") {
		t.Errorf("no Metadata-level note:\n%s", errOut)
	}
}

func TestWholeCorpusHasNoBadLines(t *testing.T) {
	files, _ := filepath.Glob(filepath.Join(corpus, "*.jsonl"))
	if len(files) < 12 {
		t.Fatalf("corpus: %d files", len(files))
	}
	code, out, errOut := run(t, "", files...)
	// 9 API and token findings, 9 kubelets out of the version-skew policy and 7 kubectl
	// users (one finding per caller, release and day).
	if code != ExitRemoved || !strings.Contains(errOut, "799 events in 12 inputs, 25 findings") || !strings.Contains(errOut, "0 bad lines") {
		t.Fatalf("exit %d\n%s", code, errOut)
	}
	if strings.Count(out, "\n") != 25 {
		t.Errorf("want 25 finding lines:\n%s", out)
	}
}

func TestProgressLine(t *testing.T) {
	if got := progressLine(50<<20, 100<<20, 1000, 2*time.Second); !strings.Contains(got, " 50% of 100.0 MiB") || !strings.Contains(got, "500 events/s") {
		t.Errorf("progress %q", got)
	}
	if got := progressLine(3<<20, -1, 10, time.Second); !strings.Contains(got, "3.0 MiB read") {
		t.Errorf("progress without a size %q", got)
	}
}

func TestBlocks(t *testing.T) {
	for _, tc := range []struct {
		removed, target string
		want            bool
	}{{"1.25", "1.25", true}, {"1.25", "1.24", false}, {"1.9", "1.16", true}, {"1.16", "1.9", false}, {"", "1.30", false}, {"1.40", "", true}} {
		target, _ := kubeversion.Parse(tc.target) // "": unset
		if got := Blocks(tc.removed, target); got != tc.want {
			t.Errorf("Blocks(%q, %q) = %v", tc.removed, tc.target, got)
		}
	}
}

// An attacker writes the user agent, user name and object name of an audit event: scan must
// not pass their control characters (terminal escape sequences, forged newlines) to the
// terminal, in the table nor in the summary; the JSON lines keep them, JSON-escaped.
func TestTerminalInjection(t *testing.T) {
	ev := strings.NewReplacer(
		`"userAgent":"helm/v3.8.0"`, `"userAgent":"evil\u001b]0;pwned\u0007\u001b[2J"`,
		`"username":"ci-bot"`, `"username":"ci-bot\nFAKE: all clear\r"`,
		`"namespace":"x"`, `"namespace":"x\u001b[31m"`,
	).Replace(removedEv)
	pod := strings.NewReplacer(`"resource":"pods"`, `"resource":"po\u001b[1mds"`).Replace(podMetaEv)
	f := write(t, "audit.log", ev+"\n"+pod+"\n")
	for _, format := range []string{"table", "json"} {
		code, out, errOut := run(t, "", "--format", format, f)
		if code != ExitRemoved {
			t.Fatalf("%s: exit %d\n%s%s", format, code, out, errOut)
		}
		if format == "json" {
			var j JSONFinding
			if err := json.Unmarshal([]byte(strings.SplitN(out, "\n", 2)[0]), &j); err != nil || j.UserAgent != "evil\x1b]0;pwned\x07\x1b[2J" {
				t.Errorf("json: %v, user agent %q", err, j.UserAgent)
			}
		}
		for name, s := range map[string]string{"stdout": out, "stderr": errOut} {
			if strings.ContainsAny(s, "\x1b\x07\r") || strings.Contains(s, "\nFAKE") {
				t.Errorf("%s %s holds raw control characters:\n%q", format, name, s)
			}
		}
		if !strings.Contains(out+errOut, `evil\x1b]0;pwned\a`) || !strings.Contains(out+errOut, `ci-bot\nFAKE`) {
			t.Errorf("%s: the escaped values are missing:\n%s%s", format, out, errOut)
		}
	}
}

func TestUsageErrors(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"/nonexistent/audit.log"}, "classify scan: open /nonexistent/audit.log: no such file or directory\n"},
		{[]string{"--dedup-window", "-1", "x"}, "classify scan: --dedup-window -1: want a number of keys, 0 or more (below 2: the default, 200000)\n"},
		{[]string{"--max-bad-reports", "-1", "x"}, "classify scan: --max-bad-reports -1: want 0 or more (0: count bad lines without reporting them)\n"},
	} {
		code, _, errOut := run(t, "", c.args...)
		if code != ExitError || !strings.HasPrefix(errOut, c.want) {
			t.Errorf("scan %v: exit %d, stderr %q, want %d and %q", c.args, code, errOut, ExitError, c.want)
		}
	}
}

// encoding/json leaves DEL and the C1 controls raw (U+009B is a CSI to many terminals):
// the JSON lines escape them too, keeping the value.
func TestJSONEscapesC1Controls(t *testing.T) {
	ev := strings.Replace(removedEv, `"userAgent":"helm/v3.8.0"`, `"userAgent":"evil\u009b2J\u007f"`, 1)
	f := write(t, "audit.log", ev+"\n")
	_, out, _ := run(t, "", f)
	if strings.ContainsAny(out, "\u009b\x7f") {
		t.Errorf("raw C1 or DEL in the JSON output: %q", out)
	}
	var j JSONFinding
	if err := json.Unmarshal([]byte(out), &j); err != nil || j.UserAgent != "evil\u009b2J\x7f" {
		t.Errorf("user agent %q, %v", j.UserAgent, err)
	}
}

// An input that held no audit event (empty, a README, another JSON log) is no verdict: exit 1
// saying nothing was checked, never "0 findings" and 0, as a CI step pointed at the wrong file
// would otherwise pass. One audit event among bad lines is a verdict.
func TestNoAuditEventIsAnError(t *testing.T) {
	for name, content := range map[string]string{
		"empty":       "",
		"a README":    "# auditlens\n\nRun `make run`.\n",
		"other JSON":  `{"level":"info","msg":"started"}` + "\n" + `{"ts":1,"auditID":"not-an-event"}` + "\n",
		"blank lines": "\n\n\n",
	} {
		code, stdout, stderr := run(t, "", "--format", "table", write(t, "in.log", content))
		if code != ExitError || !strings.Contains(stderr, "no audit event in the input") {
			t.Errorf("%s: exit %d, want %d saying no audit event was read; stdout %q stderr %q", name, code, ExitError, stdout, stderr)
		}
	}
	one := `{"kind":"Event","apiVersion":"audit.k8s.io/v1","level":"Metadata","auditID":"a1","stage":"ResponseComplete","requestURI":"/api/v1/namespaces","verb":"list","user":{"username":"alice"},"objectRef":{"resource":"namespaces","apiVersion":"v1"},"responseStatus":{"code":200},"requestReceivedTimestamp":"2026-12-01T10:00:00.000000Z","stageTimestamp":"2026-12-01T10:00:00.010000Z"}`
	if code, _, stderr := run(t, "", "--format", "table", write(t, "in.log", "not json\n"+one+"\n")); code != ExitClean || strings.Contains(stderr, "no audit event") {
		t.Errorf("one clean event among a bad line: exit %d, want %d; stderr %q", code, ExitClean, stderr)
	}
}

// A target past every release the catalogue knows a removal of cannot be judged: refused with
// what the catalogue knows, not read as "nothing blocks".
func TestTargetPastTheCatalogue(t *testing.T) {
	in := write(t, "in.log", "")
	code, _, stderr := run(t, "", "--target-version", "1.99", in)
	if code != ExitError || !strings.Contains(stderr, "target version 1.99 is past what this catalogue can judge") {
		t.Errorf("--target-version 1.99: exit %d, stderr %q", code, stderr)
	}
	if code, _, stderr := run(t, "", "--target-version", "1.25", in); strings.Contains(stderr, "past what this catalogue") {
		t.Errorf("--target-version 1.25 refused: exit %d, %q", code, stderr)
	}
}

// TestScanFindsReadersOfEveryVersion: as the service does, a read of the old version minutes
// after the same caller read its successor is an enumerator-read (blocking nothing); a write,
// a read twenty minutes later and another caller's read block.
func TestScanFindsReadersOfEveryVersion(t *testing.T) {
	ev := func(id, at, user, verb, version string) string {
		gv := map[string]string{"v1": "networking.k8s.io/v1", "v1beta1": "extensions/v1beta1"}[version]
		group, _, _ := strings.Cut(gv, "/")
		return fmt.Sprintf(`{"kind":"Event","apiVersion":"audit.k8s.io/v1","level":"Metadata","auditID":%q,"stage":"ResponseComplete",`+
			`"requestURI":"/apis/%s/ingresses","verb":%q,"user":{"username":%q},"userAgent":"backup/2.1",`+
			`"objectRef":{"resource":"ingresses","apiGroup":%q,"apiVersion":%q},"responseStatus":{"code":200},`+
			`"requestReceivedTimestamp":"2026-11-29T%sZ","stageTimestamp":"2026-11-29T%sZ"}`, id, gv, verb, user, group, version, at, at)
	}
	log := strings.Join([]string{
		ev("e1", "10:00:00", "backup", "list", "v1"),
		ev("e2", "10:00:02", "backup", "list", "v1beta1"),
		ev("e3", "10:00:03", "backup", "create", "v1beta1"),
		ev("e4", "10:20:00", "backup", "list", "v1beta1"),
		ev("e5", "10:00:04", "other", "list", "v1beta1"),
	}, "\n") + "\n"
	_, out, errOut := run(t, "", "--format", "json", write(t, "audit.log", log))
	got := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("%v: %s (%s)", err, line, errOut)
		}
		got[m["audit_id"].(string)] = m["rule_id"].(string)
	}
	want := map[string]string{"e2": "enumerator-read", "e3": "removed-api", "e4": "removed-api", "e5": "removed-api"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("findings %v, want %v", got, want)
	}
}
