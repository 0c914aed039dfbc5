package scan

import (
	"bytes"
	"encoding/json"
	"io"
	"strings"
	"testing"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/auditlens/auditlens/lib/auditevent"
	"github.com/auditlens/auditlens/lib/printable"
	auditlensv1 "github.com/auditlens/auditlens/proto/auditlens/v1"
	"github.com/auditlens/auditlens/services/classify/rules"
)

// reference is the JSON line as encoding/json writes it, escaped by lib/printable.
func reference(f *auditlensv1.Finding) []byte {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(ToJSON(f))
	return printable.JSON(nil, buf.Bytes())
}

var hostileStrings = []string{
	"", "plain", `quote " and \ backslash`, "\x00\x01\b\f\n\r\t\x1b\x1f", "del\x7f", "c1 \u0080\u0085\u009b\u009f",
	"\u00a0 nbsp é 日本", "line sep \u2028 para \u2029", "bad utf8 \xff\xfe \xc3", "<script>&amp;</script>", "emoji 😀", "\xed\xa0\x80 surrogate",
}

func TestAppendJSONIsEncodingJSON(t *testing.T) {
	var findings []*auditlensv1.Finding
	for i, s := range hostileStrings {
		findings = append(findings, &auditlensv1.Finding{
			RuleId: s, Severity: auditlensv1.Severity(i % 4), Cluster: s, AuditId: s, Verb: s, RequestUri: s, ApiGroup: s,
			ApiVersion: s, Resource: s, Subresource: s, Namespace: s, Name: s, Username: s, UserAgent: s, SourceIp: s,
			ResponseCode: int32(i*100 - 300), DeprecatedIn: s, RemovedIn: s, Replacement: s, Message: s, Stage: s, Node: s,
			Confidence: auditlensv1.Confidence(i % 4), EventTime: timestamppb.New(timestamppb.Now().AsTime().Add(-1)), RequestReceived: int64(i%2) * (1764583200 + int64(i)),
			Evidence: []*auditlensv1.Evidence{{Path: s, Value: s}, {Path: "b", Value: s + "x"}}[:i%3],
		})
	}
	findings = append(findings, &auditlensv1.Finding{})
	// And every match of the real-world corpus, stages not merged.
	s, files, _ := newScanner(inputsOf(t), io.Discard, io.Discard)
	all := &collect{s: s}
	w := s.newWorker(all)
	for _, f := range files {
		if err := s.input(f, nil, w.read); err != nil {
			t.Fatal(err)
		}
	}
	if len(all.findings) < 17 {
		t.Fatalf("%d findings in the corpus", len(all.findings))
	}
	findings = append(findings, all.findings...)
	for _, f := range findings {
		if got, want := appendJSON(nil, f), reference(f); !bytes.Equal(got, want) {
			t.Errorf("appendJSON:\n%s\nencoding/json:\n%s", got, want)
		}
	}
}

// collect is a sink that keeps every match as a finding.
type collect struct {
	s        *scanner
	findings []*auditlensv1.Finding
}

func (c *collect) match(ev *auditevent.Event, m *rules.Match, _ position) {
	c.findings = append(c.findings, c.s.engine.Finding(ev, m, c.s.cfg.Cluster, ""))
}

func (c *collect) bad(string, error) {}

func FuzzAppendString(f *testing.F) {
	for _, s := range hostileStrings {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		fd := &auditlensv1.Finding{UserAgent: s, Evidence: []*auditlensv1.Evidence{{Path: s, Value: s}}}
		if got, want := appendJSON(nil, fd), reference(fd); !bytes.Equal(got, want) {
			t.Fatalf("%q:\n%s\n%s", s, got, want)
		}
	})
}

// appendString checks eight bytes at a time: each byte that needs escaping, at every place
// in a word and across words, is escaped as encoding/json and lib/printable escape it.
func TestAppendStringWordByWord(t *testing.T) {
	specials := []string{`"`, `\`, "\x00", "\x1f", " ", "\x7f", "\u0080", "\u009b", "\u2028", "é", "\xff", "~", "!"}
	for _, sp := range specials {
		for pos := range 26 {
			s := strings.Repeat("a", pos) + sp + strings.Repeat("b", 25-pos)
			var buf bytes.Buffer
			enc := json.NewEncoder(&buf)
			enc.SetEscapeHTML(false)
			_ = enc.Encode(s)
			want := bytes.TrimSuffix(printable.JSON(nil, buf.Bytes()), []byte("\n"))
			if got := appendString(nil, s); !bytes.Equal(got, want) {
				t.Fatalf("appendString(%q) = %s, want %s", s, got, want)
			}
		}
	}
}
