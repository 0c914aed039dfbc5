package tail_test

import (
	"testing"

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
