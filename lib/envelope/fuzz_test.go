package envelope

import (
	"path/filepath"
	"testing"

	"github.com/auditlens/auditlens/lib/auditevent"
	"github.com/auditlens/auditlens/lib/envelope/envelopetest"
)

// FuzzUnwrap: any input gives an error or events; never a panic, never an event the audit
// decoder cannot read that was not counted, and Split agrees with Unwrap on the count.
func FuzzUnwrap(f *testing.F) {
	files, _ := filepath.Glob("testdata/managed/*.json*")
	for _, file := range files {
		for _, in := range inputs(f, file) {
			f.Add(in)
		}
	}
	plain := inputs(f, "../auditevent/testdata/real-world/eks-oomkilled-lambda-readme.jsonl")
	for _, sh := range envelopetest.Shapes(plain) {
		for _, in := range splitInputs(sh.Name, sh.Data) {
			f.Add(in)
		}
	}
	f.Add([]byte(`2026-11-30T12:00:00Z {"kind":"Event"}`))
	f.Add([]byte(`{"records":[{"data":""},{"Data":"H4sI"}]}{"a":1}`))
	d, dec := NewDecoder(1<<20), auditevent.NewDecoder(1<<20)
	f.Fuzz(func(t *testing.T, data []byte) {
		n := 0
		st, err := d.Unwrap(data, func(ev []byte, o Origin) error {
			n++
			if o.Cloud == "" || o.Envelope == "" {
				t.Fatalf("event without an origin: %+v", o)
			}
			_ = dec.Decode(ev, func(*auditevent.Event) error { return nil })
			return nil
		})
		if err == nil && n != st.Events {
			t.Fatalf("%d events passed, %d counted", n, st.Events)
		}
		items, st2, err2 := d.Split(data, 1<<20)
		if (err == nil) != (err2 == nil) || st2.Events != st.Events || st2.Skipped != st.Skipped {
			t.Fatalf("split: %v %+v; unwrap: %v %+v", err2, st2, err, st)
		}
		if err2 == nil && len(items) < st2.Events {
			// An EventList inside may give more items, never fewer.
			for _, it := range items {
				if it.Err == nil && it.AuditID == "" {
					t.Fatalf("item without an auditID: %+v", it)
				}
			}
		}
		_, _ = d.Decode(dec, data, func(*auditevent.Event) error { return nil })
	})
}
