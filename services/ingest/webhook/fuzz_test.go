package webhook

import (
	"log/slog"
	"strings"
	"testing"

	"github.com/auditlens/auditlens/lib/bus"
	"github.com/auditlens/auditlens/lib/bus/eventbatch"
	"github.com/auditlens/auditlens/services/ingest/input"
	"github.com/auditlens/auditlens/services/ingest/internal/testlog"
)

// FuzzWebhookBody feeds request bodies to the webhook's splitting: it never panics, every
// message it makes is valid and bounded (id, headers, dead-letter data), each input event is
// an event message or a dead letter, and an accepted body loses nothing.
func FuzzWebhookBody(f *testing.F) {
	ev := testlog.Load(f)
	var items []string
	for i := range 12 {
		e, _ := ev.Event(i)
		items = append(items, string(e))
		f.Add(e) // a single Event is accepted too
	}
	list := func(items ...string) []byte {
		return []byte(`{"kind":"EventList","apiVersion":"audit.k8s.io/v1","metadata":{},"items":[` + strings.Join(items, ",") + `]}`)
	}
	f.Add(list(items...))
	f.Add(list(items[0], `{"kind":"Event","stage":"x"}`, items[1]))
	f.Add(list(items[2], `"not an object"`, `{"auditID":"`+strings.Repeat("A", 5000)+`","stage":"ResponseComplete"}`))
	f.Add(list())
	f.Add([]byte(`{"kind":"EventList","items":null}`))
	f.Add([]byte("hello"))
	f.Add([]byte{})
	header := map[string]string{bus.HeaderNode: "cp-1"}
	log := slog.New(slog.DiscardHandler)
	batch := eventbatch.DefaultConfig()
	batch.MaxEvents = 5 // several batches from one list
	env := input.MustEnv(input.Env{Bus: nobus{}, Cluster: "test", Node: "cp-1", MaxEventSize: 64 << 10, Batch: batch})
	f.Fuzz(func(t *testing.T, body []byte) {
		msgs, c, whole := split(body, env, header, log)
		events, bad := c.Events, c.Bad
		nEvents, nDead := 0, 0
		for _, m := range msgs {
			if err := m.Validate(); err != nil {
				t.Fatalf("invalid message: %v", err)
			}
			if len(m.ID) > bus.MaxIDLen {
				t.Fatalf("id of %d bytes", len(m.ID))
			}
			switch m.Stream {
			case bus.Events:
				evs := [][]byte{m.Data}
				if eventbatch.IsBatch(m.Header) {
					var err error
					if evs, _, err = eventbatch.Events(m.Header, m.Data, nil, nil); err != nil || len(evs) != eventbatch.Count(m.Header) || len(evs) > 5 {
						t.Fatalf("batch of %d events (header %d, at most 5): %v", len(evs), eventbatch.Count(m.Header), err)
					}
				}
				for _, ev := range evs {
					nEvents++
					if len(ev) > 64<<10 {
						t.Fatalf("event of %d bytes over the cap", len(ev))
					}
				}
			case bus.DeadLetter:
				nDead++
				if len(m.Data) > bus.DeadLetterMaxData {
					t.Fatalf("dead letter of %d bytes", len(m.Data))
				}
				for k, v := range m.Header {
					if len(v) > bus.MaxHeaderLen+32 {
						t.Fatalf("header %s of %d bytes", k, len(v))
					}
				}
			default:
				t.Fatalf("message on stream %s", m.Stream)
			}
		}
		dead := 0
		for _, n := range bad {
			dead += n
		}
		if nEvents != events || nDead != dead {
			t.Fatalf("%d event messages for %d events, %d dead letters for %d bad", nEvents, events, nDead, dead)
		}
		if whole != nil && (nEvents != 0 || nDead != 1) {
			t.Fatalf("an unusable body made %d events and %d dead letters, want its one dead letter", nEvents, nDead)
		}
		if len(body) > 0 && len(msgs) == 0 && whole == nil && !strings.Contains(string(body), "items") {
			t.Fatalf("a non-empty body made nothing: %q", body)
		}
	})
}

// nobus is the bus of an env that split never publishes to.
type nobus struct{ input.Bus }
