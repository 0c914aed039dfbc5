package auditevent

import (
	"errors"
	"strings"
	"testing"
)

func TestPeek(t *testing.T) {
	ev := `{"kind":"Event","apiVersion":"audit.k8s.io/v1","auditID":"a-1","stage":"ResponseComplete","verb":"get"}`
	r, err := Peek([]byte(ev), 1024)
	if err != nil || r != (Ref{APIVersion: "audit.k8s.io/v1", AuditID: "a-1", Stage: "ResponseComplete"}) || r.Key() != "a-1/ResponseComplete" {
		t.Fatalf("Peek = %+v, %v", r, err)
	}
	for _, tc := range []struct {
		in   string
		max  int
		want error
	}{
		{ev, 10, ErrTooLarge},
		{"{\"auditID\":\"\xff\"}", 0, ErrInvalidUTF8},
		{`{"auditID":`, 0, ErrNotJSON},
		{`[1,2]`, 0, ErrNotAuditEvent},
		{`{"kind":"Pod","auditID":"a","stage":"s"}`, 0, ErrNotAuditEvent},
		{`{"kind":"Event","stage":"s"}`, 0, ErrNotAuditEvent},
	} {
		if _, err := Peek([]byte(tc.in), tc.max); !errors.Is(err, tc.want) {
			t.Errorf("Peek(%q) error %v, want %v", tc.in, err, tc.want)
		}
	}
}

func TestSplitList(t *testing.T) {
	list := `{"kind":"EventList","apiVersion":"audit.k8s.io/v1","items":[{"auditID":"a","stage":"ResponseStarted"},{"auditID":"a","stage":"ResponseComplete","verb":"watch"}]}`
	items, err := SplitList([]byte(list), 0)
	if err != nil || len(items) != 2 || items[1].Key() != "a/ResponseComplete" || !strings.Contains(string(items[1].Raw), `"verb":"watch"`) {
		t.Fatalf("SplitList = %+v, %v", items, err)
	}
	// The items are copies: later calls (which reuse parsers) do not change them.
	raw := string(items[0].Raw)
	_, _ = SplitList([]byte(`{"kind":"EventList","items":[{"auditID":"zzzzzzzz","stage":"zzzzzzzzzzzzzzzz"}]}`), 0)
	if string(items[0].Raw) != raw || items[0].AuditID != "a" {
		t.Fatalf("item changed by a later call: %s", items[0].Raw)
	}
	one, err := SplitList([]byte(`{"auditID":"b","stage":"Panic"}`), 0)
	if err != nil || len(one) != 1 || one[0].Key() != "b/Panic" {
		t.Fatalf("single event: %+v, %v", one, err)
	}
	if _, err := SplitList([]byte(`{"kind":"EventList","items":[{"auditID":"a","stage":"s"},{"stage":"s"}]}`), 0); !errors.Is(err, ErrNotAuditEvent) || !strings.Contains(err.Error(), "item 1") {
		t.Fatalf("bad item: %v", err)
	}
	if _, err := SplitList([]byte(`{"kind":"EventList","items":[{"auditID":"a","stage":"s","x":"`+strings.Repeat("y", 100)+`"}]}`), 50); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("large item: %v", err)
	}
}
