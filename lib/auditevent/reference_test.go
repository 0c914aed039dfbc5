package auditevent

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"
)

// corpusDir holds genuine audit events (copied from shared/testdata/real-world).
const corpusDir = "testdata/real-world"

type corpusLine struct {
	pos  string // file:line
	data []byte
}

func readCorpus(t testing.TB) []corpusLine {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(corpusDir, "*.jsonl"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no corpus in %s: %v", corpusDir, err)
	}
	var out []corpusLine
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(bytes.NewReader(b))
		sc.Buffer(nil, 16<<20)
		for n := 1; sc.Scan(); n++ {
			if len(bytes.TrimSpace(sc.Bytes())) == 0 {
				continue
			}
			out = append(out, corpusLine{fmt.Sprintf("%s:%d", filepath.Base(f), n), bytes.Clone(sc.Bytes())})
		}
	}
	return out
}

// diffReference reports how ev differs from the reference decode, "" when it agrees on every
// field that Event carries.
func diffReference(ref *auditv1.Event, ev *Event) string {
	var d []string
	eq := func(name, want, got string) {
		if want != got {
			d = append(d, fmt.Sprintf("%s: reference %q, fast %q", name, want, got))
		}
	}
	eq("kind", ref.Kind, ev.Kind)
	eq("apiVersion", ref.APIVersion, ev.APIVersion)
	eq("level", string(ref.Level), ev.Level)
	eq("auditID", string(ref.AuditID), ev.AuditID)
	eq("stage", string(ref.Stage), ev.Stage)
	eq("requestURI", ref.RequestURI, ev.RequestURI)
	eq("verb", ref.Verb, ev.Verb)
	eq("userAgent", ref.UserAgent, ev.UserAgent)
	eq("user.username", ref.User.Username, ev.User.Username)
	eq("user.uid", ref.User.UID, ev.User.UID)
	eq("user.groups", strings.Join(ref.User.Groups, "\x00"), strings.Join(ev.User.Groups, "\x00"))
	if len(ref.User.Groups) != len(ev.User.Groups) {
		d = append(d, "user.groups: length differs")
	}
	eq("sourceIPs", strings.Join(ref.SourceIPs, "\x00"), strings.Join(ev.SourceIPs, "\x00"))
	if len(ref.SourceIPs) != len(ev.SourceIPs) {
		d = append(d, "sourceIPs: length differs")
	}
	switch {
	case (ref.ImpersonatedUser == nil) != (ev.ImpersonatedUser == nil):
		d = append(d, fmt.Sprintf("impersonatedUser: reference present %v, fast present %v", ref.ImpersonatedUser != nil, ev.ImpersonatedUser != nil))
	case ref.ImpersonatedUser != nil:
		eq("impersonatedUser.username", ref.ImpersonatedUser.Username, ev.ImpersonatedUser.Username)
		eq("impersonatedUser.uid", ref.ImpersonatedUser.UID, ev.ImpersonatedUser.UID)
		eq("impersonatedUser.groups", strings.Join(ref.ImpersonatedUser.Groups, "\x00"), strings.Join(ev.ImpersonatedUser.Groups, "\x00"))
		if len(ref.ImpersonatedUser.Groups) != len(ev.ImpersonatedUser.Groups) {
			d = append(d, "impersonatedUser.groups: length differs")
		}
	}
	switch {
	case (ref.ObjectRef == nil) != (ev.ObjectRef == nil):
		d = append(d, fmt.Sprintf("objectRef: reference present %v, fast present %v", ref.ObjectRef != nil, ev.ObjectRef != nil))
	case ref.ObjectRef != nil:
		r, o := ref.ObjectRef, ev.ObjectRef
		eq("objectRef.resource", r.Resource, o.Resource)
		eq("objectRef.namespace", r.Namespace, o.Namespace)
		eq("objectRef.name", r.Name, o.Name)
		eq("objectRef.uid", string(r.UID), o.UID)
		eq("objectRef.apiGroup", r.APIGroup, o.APIGroup)
		eq("objectRef.apiVersion", r.APIVersion, o.APIVersion)
		eq("objectRef.resourceVersion", r.ResourceVersion, o.ResourceVersion)
		eq("objectRef.subresource", r.Subresource, o.Subresource)
	}
	switch {
	case (ref.ResponseStatus == nil) != (ev.ResponseStatus == nil):
		d = append(d, fmt.Sprintf("responseStatus: reference present %v, fast present %v", ref.ResponseStatus != nil, ev.ResponseStatus != nil))
	case ref.ResponseStatus != nil:
		r, o := ref.ResponseStatus, ev.ResponseStatus
		eq("responseStatus.status", r.Status, o.Status)
		eq("responseStatus.message", r.Message, o.Message)
		eq("responseStatus.reason", string(r.Reason), o.Reason)
		if r.Code != o.Code {
			d = append(d, fmt.Sprintf("responseStatus.code: reference %d, fast %d", r.Code, o.Code))
		}
	}
	teq := func(name string, want, got time.Time) {
		if !want.Equal(got) {
			d = append(d, fmt.Sprintf("%s: reference %s, fast %s", name, want, got))
		}
	}
	teq("requestReceivedTimestamp", ref.RequestReceivedTimestamp.Time, ev.RequestReceivedTimestamp)
	teq("stageTimestamp", ref.StageTimestamp.Time, ev.StageTimestamp)
	raw := func(name string, want []byte, got []byte) {
		if !bytes.Equal(want, got) {
			d = append(d, fmt.Sprintf("%s: reference %q, fast %q", name, want, got))
		}
	}
	if ref.RequestObject != nil {
		raw("requestObject", ref.RequestObject.Raw, ev.RequestObjectRaw)
	} else if ev.RequestObjectRaw != nil {
		d = append(d, "requestObject: absent in reference")
	}
	if ref.ResponseObject != nil {
		raw("responseObject", ref.ResponseObject.Raw, ev.ResponseObjectRaw)
	} else if ev.ResponseObjectRaw != nil {
		d = append(d, "responseObject: absent in reference")
	}
	got := map[string]string{}
	for _, a := range ev.Annotations {
		got[a.Key] = a.Value
	}
	if len(got) != len(ref.Annotations) {
		d = append(d, fmt.Sprintf("annotations: reference %d keys, fast %d", len(ref.Annotations), len(got)))
	}
	for k, v := range ref.Annotations {
		if g, ok := got[k]; !ok || g != v {
			d = append(d, fmt.Sprintf("annotations[%q]: reference %q, fast %q (present %v)", k, v, g, ok))
		}
		if g, ok := ev.Annotation(k); !ok || g != v {
			d = append(d, fmt.Sprintf("Annotation(%q) = %q, %v; reference %q", k, g, ok, v))
		}
	}
	return strings.Join(d, "\n")
}

// checkAgainstReference decodes data with both decoders and fails t when they disagree:
// every event the reference accepts must decode (unless it breaks a rule the reference does
// not check: not an object, no auditID or stage, a kind other than Event), and when both
// accept it, every field must match. The fast decoder may accept input the reference
// rejects in fields it does not read.
func checkAgainstReference(t *testing.T, data []byte, requireOK bool) {
	t.Helper()
	var isList struct {
		Kind string `json:"kind"`
	}
	_ = json.Unmarshal(data, &isList)
	var refs []auditv1.Event
	var refErr error
	if isList.Kind == "EventList" {
		var l auditv1.EventList
		refErr = json.Unmarshal(data, &l)
		refs = l.Items
	} else {
		var e auditv1.Event
		refErr = json.Unmarshal(data, &e)
		refs = []auditv1.Event{e}
	}
	d := NewDecoder(0)
	var got []string
	i := 0
	err := d.Decode(data, func(ev *Event) error {
		if refErr == nil && i < len(refs) {
			if diff := diffReference(&refs[i], ev); diff != "" {
				t.Errorf("fast decoder disagrees with the reference on %q:\n%s", data, diff)
			}
		}
		got = append(got, ev.AuditID+"/"+ev.Stage)
		i++
		return nil
	})
	checkPeek(t, data, got, err)
	if requireOK && (refErr != nil || err != nil) {
		t.Fatalf("decode %.200q: reference error %v, fast error %v", data, refErr, err)
	}
	if refErr != nil || err == nil {
		return
	}
	// The reference accepted it and the fast decoder did not: only allowed for what the
	// reference does not check.
	var e auditv1.Event
	if !utf8.Valid(data) {
		return // a documented bad-line reason
	}
	trimmed := bytes.TrimSpace(data)
	if len(trimmed) == 0 || trimmed[0] != '{' {
		return
	}
	if isList.Kind == "EventList" {
		return
	}
	_ = json.Unmarshal(data, &e)
	if e.AuditID == "" || e.Stage == "" || (e.Kind != "" && e.Kind != "Event") || (e.APIVersion != "" && !strings.HasPrefix(e.APIVersion, "audit.k8s.io/")) {
		return
	}
	t.Errorf("reference accepts %q but the fast decoder fails: %v", data, err)
}

func TestDecodeAgreesWithReferenceOnCorpus(t *testing.T) {
	lines := readCorpus(t)
	if len(lines) < 700 {
		t.Fatalf("corpus has %d events, want the whole real-world set", len(lines))
	}
	for _, l := range lines {
		t.Run(l.pos, func(t *testing.T) { checkAgainstReference(t, l.data, true) })
	}
	t.Logf("%d corpus events agree with k8s.io/apiserver/pkg/apis/audit/v1", len(lines))
}

// TestDecodeAgreesWithReferenceAsEventList wraps the corpus into webhook EventLists (items
// without kind and apiVersion) and checks every item against the reference EventList decode.
func TestDecodeAgreesWithReferenceAsEventList(t *testing.T) {
	lines := readCorpus(t)
	for start := 0; start < len(lines); start += 50 {
		end := min(start+50, len(lines))
		var buf bytes.Buffer
		buf.WriteString(`{"kind":"EventList","apiVersion":"audit.k8s.io/v1","metadata":{},"items":[`)
		for i, l := range lines[start:end] {
			if i > 0 {
				buf.WriteByte(',')
			}
			var m map[string]json.RawMessage
			if err := json.Unmarshal(l.data, &m); err != nil {
				t.Fatal(err)
			}
			delete(m, "kind")
			delete(m, "apiVersion")
			b, _ := json.Marshal(m)
			buf.Write(b)
		}
		buf.WriteString("]}")
		var ref auditv1.EventList
		if err := json.Unmarshal(buf.Bytes(), &ref); err != nil {
			t.Fatal(err)
		}
		i := 0
		err := NewDecoder(0).Decode(buf.Bytes(), func(ev *Event) error {
			if diff := diffReference(&ref.Items[i], ev); diff != "" {
				t.Errorf("item %d (%s): %s", i, lines[start+i].pos, diff)
			}
			i++
			return nil
		})
		if err != nil || i != end-start {
			t.Fatalf("EventList %d..%d: decoded %d items, err %v", start, end, i, err)
		}
	}
}

// checkPeek compares what ingest reads of data (Peek, SplitList) with what the decoder read:
// the same identities whenever the decoder accepts the input, and a failure whenever the
// decoder found it not JSON or not UTF-8. Peek may accept events whose other members have
// types the decoder refuses: it does not read them.
func checkPeek(t *testing.T, data []byte, keys []string, decodeErr error) {
	t.Helper()
	items, err := SplitList(data, 0)
	var peeked []string
	for _, it := range items {
		peeked = append(peeked, it.Key())
	}
	if decodeErr == nil && (err != nil || !slices.Equal(peeked, keys)) {
		t.Errorf("SplitList(%.200q) = %q, %v; the decoder read %q", data, peeked, err, keys)
	}
	if len(keys) == 1 && decodeErr == nil && !bytes.Contains(data, []byte("EventList")) {
		if r, err := Peek(data, 0); err != nil || r.Key() != keys[0] {
			t.Errorf("Peek(%.200q) = %q, %v; the decoder read %q", data, r.Key(), err, keys[0])
		}
	}
	if errors.Is(decodeErr, ErrNotJSON) || errors.Is(decodeErr, ErrInvalidUTF8) {
		if _, err := SplitList(data, 0); err == nil {
			t.Errorf("SplitList(%.200q) accepts what the decoder refuses: %v", data, decodeErr)
		}
	}
}

// edgeCases are inputs where encoding/json's rules are easy to get wrong.
var edgeCases = []string{
	`{"auditID":"a","stage":"ResponseComplete","verb":"get","VERB":"list"}`,
	`{"auditID":"a","stage":"ResponseComplete","verb":"get","verb":null}`,
	`{"auditID":"a","stage":"ResponseComplete","Verb":"create","objectRef":{"RESOURCE":"pods","resource":"deployments","apigroup":"apps"}}`,
	`{"auditID":"a","stage":"ResponseComplete","objectRef":{"resource":"pods"},"objectRef":{"name":"x"}}`,
	`{"auditID":"a","stage":"ResponseComplete","objectRef":{"resource":"pods"},"objectRef":null}`,
	`{"auditID":"a","stage":"ResponseComplete","user":{"username":"u","groups":["a","b"]},"user":{"uid":"1","groups":["c"]}}`,
	`{"auditID":"a","stage":"ResponseComplete","user":null,"sourceIPs":null,"annotations":null}`,
	`{"auditID":"a","stage":"ResponseComplete","annotations":{"k":"1","k":"2","n":null},"annotations":{"m":"3"}}`,
	`{"auditID":"a","stage":"ResponseComplete","annotations":{"k":"1"},"annotations":null,"annotations":{"m":"3"}}`,
	`{"auditID":"a","stage":"ResponseComplete","sourceIPs":["1.2.3.4",null,"::1"],"sourceIPs":["5.6.7.8"]}`,
	`{"auditID":"a\u0041\ud83d\ude00\ud800x\ud800\u0041","stage":"Response\"Complete\\\/\b\f\n\r\t"}`,
	`{"auditID":"a","stage":"s","responseStatus":{"code":404,"status":"Failure","CODE":403}}`,
	`{"auditID":"a","stage":"s","responseStatus":{"code":-0}}`,
	`{"auditID":"a","stage":"s","responseStatus":null,"responseStatus":{"metadata":{},"code":200}}`,
	`{"auditID":"a","stage":"s","requestReceivedTimestamp":"2026-02-28T23:59:59.999999Z","stageTimestamp":null}`,
	`{"auditID":"a","stage":"s","requestReceivedTimestamp":"2026-02-28T23:59:59.999999+02:00"}`,
	`{"auditID":"a","stage":"s","requestObject":{"kind":"Pod","spec":{}},"responseObject":[1,2,{"a":"b"}]}`,
	`{"auditID":"a","stage":"s","requestObject":{"kind":"Pod"},"requestObject":null}`,
	`  {"auditID" : "a" , "stage" : "s" , "unknown" : {"x":[1,2.5e-3,true,false,null,"y"]} }  `,
	`{"auditID":"a","stage":"s","impersonatedUser":{"username":"bob"},"impersonatedUser":{"groups":["g"]}}`,
	`{"auditId":"a","STAGE":"s","ſtage":"t","levelK":"x","objectref":{"reſource":"pods"}}`,
	`{"kind":"EventList","items":[{"auditID":"a","stage":"s"},{"auditID":"b","stage":"s","kind":"Event"}]}`,
}

func TestDecodeEdgeCasesAgreeWithReference(t *testing.T) {
	for _, c := range edgeCases {
		checkAgainstReference(t, []byte(c), false)
	}
}

func FuzzDecodeAgreesWithReference(f *testing.F) {
	for _, l := range readCorpus(f) {
		f.Add(l.data)
	}
	for _, c := range edgeCases {
		f.Add([]byte(c))
	}
	for _, c := range fastPathEdgeCases {
		f.Add([]byte(c))
	}
	for _, c := range decodeCases {
		f.Add([]byte(c.in))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		checkAgainstReference(t, data, false)
	})
}
