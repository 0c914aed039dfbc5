package eventbatch_test

import (
	"bytes"
	"errors"
	"fmt"
	"testing"

	"github.com/auditlens/auditlens/lib/bus"
	"github.com/auditlens/auditlens/lib/bus/eventbatch"
)

// singles are one message per event as a managed source builds them: evs of cluster, named
// cluster/<index>, with the node header.
func singles(cluster string, evs [][]byte, from int) []bus.Message {
	out := make([]bus.Message, len(evs))
	for i, ev := range evs {
		out[i] = bus.Message{Stream: bus.Events, Cluster: cluster, ID: fmt.Sprintf("%s/%d", cluster, from+i), Header: map[string]string{bus.HeaderNode: "n1"}, Data: ev}
	}
	return out
}

// unpack reads msgs back as (cluster, event) pairs and the dead letters' ids, in order.
func unpack(t *testing.T, msgs []bus.Message) (events []string, dead []string) {
	t.Helper()
	for _, m := range msgs {
		if m.Stream != bus.Events {
			dead = append(dead, m.ID)
			continue
		}
		if !eventbatch.IsBatch(m.Header) {
			events = append(events, m.Cluster+" "+string(m.Data))
			continue
		}
		evs, _, err := eventbatch.Events(m.Header, m.Data, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		if len(evs) != eventbatch.Count(m.Header) {
			t.Fatalf("batch %s: %d events, header says %d", m.ID, len(evs), eventbatch.Count(m.Header))
		}
		if m.Header[bus.HeaderNode] != "n1" {
			t.Fatalf("batch %s lost the node header: %v", m.ID, m.Header)
		}
		for _, ev := range evs {
			events = append(events, m.Cluster+" "+string(ev))
		}
	}
	return events, dead
}

func TestPackKeepsOrderClustersAndDeadLetters(t *testing.T) {
	evs := realEvents(t)
	cfg := eventbatch.DefaultConfig()
	cfg.MaxEvents = 50
	huge := bytes.Repeat([]byte("x"), cfg.MaxBytes+1)
	var in []bus.Message
	in = append(in, singles("prod", evs[:120], 0)...)
	in = append(in, bus.NewDeadLetter("prod", "kafka", "t/0/7", "kafka:t/0/7", errors.New("bad"), []byte("{"), nil))
	in = append(in, singles("prod", [][]byte{huge}, 120)...)
	in = append(in, singles("prod", evs[120:130], 121)...)
	in = append(in, singles("staging", evs[130:], 131)...)

	out := eventbatch.Pack(cfg, in)
	wantEvents, wantDead := unpack(t, in)
	gotEvents, gotDead := unpack(t, out)
	if len(gotEvents) != len(wantEvents) || len(gotDead) != len(wantDead) {
		t.Fatalf("packed: %d events, %d dead letters; want %d, %d", len(gotEvents), len(gotDead), len(wantEvents), len(wantDead))
	}
	for i := range wantEvents {
		if gotEvents[i] != wantEvents[i] {
			t.Fatalf("event %d differs after packing (order or cluster)", i)
		}
	}
	// prod: 120 events in 3 batches, the dead letter, the huge one alone, 10 in one;
	// staging (right after prod) in one of its own.
	var kinds []string
	for _, m := range out {
		switch {
		case m.Stream != bus.Events:
			kinds = append(kinds, "dead")
		case eventbatch.IsBatch(m.Header):
			kinds = append(kinds, fmt.Sprintf("%s:%d", m.Cluster, eventbatch.Count(m.Header)))
		default:
			kinds = append(kinds, m.Cluster+":single")
		}
	}
	want := fmt.Sprint([]string{"prod:50", "prod:50", "prod:20", "dead", "prod:single", "prod:10", fmt.Sprintf("staging:%d", len(evs)-130)})
	if fmt.Sprint(kinds) != want {
		t.Fatalf("messages %v, want %s", kinds, want)
	}
}

func TestPackNamesARunByItsEvents(t *testing.T) {
	evs := realEvents(t)[:40]
	cfg := eventbatch.DefaultConfig()
	a := eventbatch.Pack(cfg, singles("prod", evs, 0))
	b := eventbatch.Pack(cfg, singles("prod", evs, 0))
	c := eventbatch.Pack(cfg, singles("prod", evs, 1))
	if len(a) != 1 || len(b) != 1 || len(c) != 1 {
		t.Fatalf("%d, %d, %d messages, want one batch each", len(a), len(b), len(c))
	}
	if a[0].ID != b[0].ID {
		t.Errorf("the same run packed twice got ids %q and %q: a re-sent batch would be stored twice", a[0].ID, b[0].ID)
	}
	if a[0].ID == c[0].ID {
		t.Errorf("runs of other events share the id %q: the bus would drop one", a[0].ID)
	}
	off := eventbatch.DefaultConfig()
	off.MaxEvents = 1
	in := singles("prod", evs, 0)
	if got := eventbatch.Pack(off, in); len(got) != len(in) || eventbatch.IsBatch(got[0].Header) {
		t.Errorf("batches off: %d messages, want the %d singles unchanged", len(got), len(in))
	}
}
