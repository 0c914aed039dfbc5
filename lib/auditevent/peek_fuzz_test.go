package auditevent

import (
	"bytes"
	"encoding/json"
	"errors"
	"testing"
)

// peekSeeds are real events (the corpus), EventLists made of them, and shapes Peek and
// SplitList must refuse.
func peekSeeds(f *testing.F) {
	lines := readCorpus(f)
	for _, l := range lines {
		f.Add(l.data)
	}
	for i := 0; i+3 <= len(lines) && i < 60; i += 3 {
		list := []byte(`{"kind":"EventList","apiVersion":"audit.k8s.io/v1","metadata":{},"items":[`)
		list = append(append(append(append(append(list, lines[i].data...), ','), lines[i+1].data...), ','), lines[i+2].data...)
		f.Add(append(list, "]}"...))
	}
	for _, c := range edgeCases {
		f.Add([]byte(c))
	}
	for _, s := range []string{
		`{"kind":"EventList","items":null}`, `{"kind":"EventList","items":[]}`, `{"kind":"EventList","items":{}}`,
		`{"kind":"EventList","apiVersion":"v1","items":[{"auditID":"a","stage":"s"}]}`,
		`{"kind":"EventList","items":[{"auditID":"a","stage":"s"},{"stage":"s"}]}`,
		`{"kind":"EventList","items":[{"auditID":"a","stage":"s"}]} trailing`,
		`{"auditID":"a","stage":"s","auditID":"b"}`, `{"AUDITID":"a","Stage":"s"}`, `{"auditID":null,"stage":"s"}`,
		"{\"auditID\":\"\xff\",\"stage\":\"s\"}", `[]`, `"x"`, ``, `{`,
	} {
		f.Add([]byte(s))
	}
}

// identity is what encoding/json reads of an event's identity, as classify decodes it later.
type identity struct {
	Kind       string `json:"kind"`
	APIVersion string `json:"apiVersion"`
	AuditID    string `json:"auditID"`
	Stage      string `json:"stage"`
}

// lenient makes data what encoding/json accepts where the scanner is lenient on purpose:
// raw control characters in strings (see scanner.str) become spaces.
func lenient(data []byte) []byte {
	return bytes.Map(func(r rune) rune {
		if r < 0x20 {
			return ' '
		}
		return r
	}, data)
}

// sameLenient compares what encoding/json read from lenient(data) with what Peek read from
// data: equal, or equal once Peek's raw control characters are spaces too.
func sameLenient(reference, peeked string) bool {
	return reference == peeked || reference == string(lenient([]byte(peeked)))
}

// FuzzPeek checks that Peek never panics and that an event it accepts is valid JSON whose
// identity encoding/json reads the same.
func FuzzPeek(f *testing.F) {
	peekSeeds(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := Peek(data, 1<<20)
		if err != nil {
			if !errors.Is(err, ErrNotJSON) && !errors.Is(err, ErrInvalidUTF8) && !errors.Is(err, ErrNotAuditEvent) && !errors.Is(err, ErrTooLarge) {
				t.Fatalf("Peek error %v matches none of the package's errors", err)
			}
			return
		}
		var id identity
		if err := json.Unmarshal(lenient(data), &id); err != nil {
			t.Fatalf("Peek accepted what encoding/json refuses (%v): %q", err, data)
		}
		if !sameLenient(id.AuditID, r.AuditID) || !sameLenient(id.Stage, r.Stage) {
			t.Fatalf("Peek read %+v, encoding/json %+v", r, id)
		}
		if r.AuditID == "" || r.Stage == "" {
			t.Fatalf("Peek accepted an event without identity: %+v", r)
		}
	})
}

// FuzzSplitList checks that SplitList and SplitListShared never panic, agree, return items
// that Peek reads to the same identity, and find as many items as encoding/json does.
func FuzzSplitList(f *testing.F) {
	peekSeeds(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		items, err := SplitList(data, 1<<20)
		shared, serr := SplitListShared(data, 1<<20)
		if (err == nil) != (serr == nil) || len(items) != len(shared) {
			t.Fatalf("SplitList %d items, %v; SplitListShared %d items, %v", len(items), err, len(shared), serr)
		}
		if err != nil {
			return
		}
		for i, it := range items {
			if !bytes.Equal(it.Raw, shared[i].Raw) || it.Ref != shared[i].Ref {
				t.Fatalf("item %d differs between SplitList and SplitListShared", i)
			}
			r, err := Peek(it.Raw, 1<<20)
			if err != nil || r.AuditID != it.AuditID || r.Stage != it.Stage {
				t.Fatalf("item %d: Peek %+v, %v; SplitList %+v", i, r, err, it.Ref)
			}
		}
		var list struct {
			Kind  string            `json:"kind"`
			Items []json.RawMessage `json:"items"`
		}
		if err := json.Unmarshal(lenient(data), &list); err != nil {
			t.Fatalf("SplitList accepted what encoding/json refuses (%v): %q", err, data)
		}
		if list.Kind == "EventList" && len(list.Items) != len(items) {
			t.Fatalf("SplitList found %d items, encoding/json %d", len(items), len(list.Items))
		}
	})
}
