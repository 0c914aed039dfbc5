package tail_test

import (
	"fmt"
	"testing"

	"github.com/auditlens/auditlens/lib/reason"
	"github.com/auditlens/auditlens/services/ingest/tail"
)

func TestSameContent(t *testing.T) {
	head := []byte(`{"kind":"Event","auditID":"a"}`)
	fp, n := tail.Fingerprint(head)
	f := tail.File{Fingerprint: fp, FingerprintLen: n}
	for _, tc := range []struct {
		name string
		head string
		want bool
	}{
		{"same", string(head), true},
		{"grown", string(head) + "\nmore", true},
		{"shorter", string(head[:10]), false},
		{"different", `{"kind":"Event","auditID":"b"}`, false},
	} {
		if got := f.SameContent([]byte(tc.head)); got != tc.want {
			t.Errorf("%s: SameContent = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// The tailer's errors carry the labels of the reason vocabulary that ingest's metrics use.
func TestErrorLabels(t *testing.T) {
	if got := reason.Of(fmt.Errorf("line 3: %w", tail.ErrLineTooLong)); got != reason.TooLarge {
		t.Errorf("ErrLineTooLong: label %q, want %q", got, reason.TooLarge)
	}
	if got := reason.Of(tail.ErrIncomplete); got != reason.IncompleteLine {
		t.Errorf("ErrIncomplete: label %q, want %q", got, reason.IncompleteLine)
	}
}
