package eventbatch_test

import (
	"bytes"
	"errors"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/klauspost/compress/s2"

	"github.com/auditlens/auditlens/lib/bus"
	"github.com/auditlens/auditlens/lib/bus/eventbatch"
)

// realEvents are the genuine audit events of examples/audit.log, one per line.
func realEvents(t testing.TB) [][]byte {
	t.Helper()
	data, err := os.ReadFile("../../../examples/audit.log")
	if err != nil {
		t.Fatal(err)
	}
	var out [][]byte
	for _, l := range bytes.Split(data, []byte("\n")) {
		if len(l) > 0 {
			out = append(out, l)
		}
	}
	return out
}

// pack packs evs with cfg, keys their indexes.
func pack(cfg eventbatch.Config, mode eventbatch.IDMode, evs [][]byte) []bus.Message {
	p := eventbatch.NewPacker(cfg, "prod", "prod/file/fp", mode, map[string]string{bus.HeaderNode: "n1"})
	var out []bus.Message
	for i, ev := range evs {
		out = p.Add(out, ev, strconv.Itoa(i))
	}
	return p.Flush(out)
}

func TestRoundTripEveryCompression(t *testing.T) {
	evs := realEvents(t)
	for _, c := range []string{eventbatch.CompressionNone, eventbatch.CompressionS2, eventbatch.CompressionZstd} {
		t.Run(c, func(t *testing.T) {
			cfg := eventbatch.DefaultConfig()
			cfg.Compression, cfg.MaxEvents = c, 7
			msgs := pack(cfg, eventbatch.ByRange, evs)
			if want := (len(evs) + 6) / 7; len(msgs) != want {
				t.Fatalf("%d messages of at most 7 events for %d events, want %d", len(msgs), len(evs), want)
			}
			var got [][]byte
			var buf []byte
			for _, m := range msgs {
				if !eventbatch.IsBatch(m.Header) || m.Header[bus.HeaderNode] != "n1" || m.Stream != bus.Events || m.Cluster != "prod" {
					t.Fatalf("message %s: headers %v, stream %s, cluster %s", m.ID, m.Header, m.Stream, m.Cluster)
				}
				n := len(got)
				var err error
				if got, buf, err = eventbatch.Events(m.Header, m.Data, buf, got); err != nil {
					t.Fatal(err)
				}
				if eventbatch.Count(m.Header) != len(got)-n {
					t.Errorf("%s: header says %d events, holds %d", m.ID, eventbatch.Count(m.Header), len(got)-n)
				}
				// Copy: the next message reuses buf.
				for i := n; i < len(got); i++ {
					got[i] = append([]byte(nil), got[i]...)
				}
			}
			if len(got) != len(evs) {
				t.Fatalf("%d events back, want %d", len(got), len(evs))
			}
			for i := range evs {
				if !bytes.Equal(got[i], evs[i]) {
					t.Fatalf("event %d changed", i)
				}
			}
			if msgs[0].ID != "prod/file/fp/0-6" || msgs[1].ID != "prod/file/fp/7-13" {
				t.Errorf("ids %q, %q: want the range of keys", msgs[0].ID, msgs[1].ID)
			}
		})
	}
}

func TestBoundedByBytesAndLargeEventsGoAlone(t *testing.T) {
	cfg := eventbatch.Config{MaxEvents: 1000, MaxBytes: 4096, Compression: eventbatch.CompressionNone}
	p := eventbatch.NewPacker(cfg, "prod", "x", eventbatch.ByRange, nil)
	if p.Fits(4096) || !p.Fits(4000) {
		t.Error("Fits must leave room for the framing and refuse what exceeds MaxBytes")
	}
	var msgs []bus.Message
	for i := range 100 {
		msgs = p.Add(msgs, bytes.Repeat([]byte("x"), 1000), strconv.Itoa(i))
	}
	msgs = p.Flush(msgs)
	for _, m := range msgs {
		if len(m.Data) > 4096 {
			t.Errorf("%s: %d bytes, more than MaxBytes", m.ID, len(m.Data))
		}
	}
	if len(msgs) != 25 {
		t.Errorf("%d messages, want 25 of 4 events", len(msgs))
	}
	if off := eventbatch.NewPacker(eventbatch.Config{MaxEvents: 1, MaxBytes: 4096}, "c", "x", eventbatch.ByRange, nil); off.Fits(10) {
		t.Error("with MaxEvents 1 nothing goes into batches")
	}
}

// TestSameRunSameID: a run of events packed again (a retry after a crash) gets the same ids,
// so the bus de-duplicates it; another run gets others.
func TestSameRunSameID(t *testing.T) {
	evs := realEvents(t)
	cfg := eventbatch.DefaultConfig()
	for _, mode := range []eventbatch.IDMode{eventbatch.ByRange, eventbatch.ByHash} {
		a, b := pack(cfg, mode, evs), pack(cfg, mode, evs)
		if len(a) != len(b) || a[0].ID != b[0].ID || !bytes.Equal(a[0].Data, b[0].Data) {
			t.Errorf("mode %d: the same run packed twice differs", mode)
		}
		c := pack(cfg, mode, evs[1:])
		if c[0].ID == a[0].ID {
			t.Errorf("mode %d: another run has the same id %s", mode, a[0].ID)
		}
	}
}

func TestBadPayloadsAreErrBad(t *testing.T) {
	bomb := s2.Encode(nil, make([]byte, eventbatch.MaxBytesLimit+1))
	for _, c := range []struct {
		name string
		h    map[string]string
		data []byte
	}{
		{"unknown encoding", map[string]string{eventbatch.HeaderEncoding: "lz77"}, []byte{0x0a, 0x01, 'x'}},
		{"broken s2", map[string]string{eventbatch.HeaderEncoding: "s2"}, []byte("not s2 at all")},
		{"broken zstd", map[string]string{eventbatch.HeaderEncoding: "zstd"}, []byte("not zstd at all")},
		{"truncated framing", nil, []byte{0x0a, 0x10, 'x'}},
		{"s2 bomb", map[string]string{eventbatch.HeaderEncoding: "s2"}, bomb},
	} {
		_, _, err := eventbatch.Events(c.h, c.data, nil, nil)
		if !errors.Is(err, eventbatch.ErrBad) {
			t.Errorf("%s: %v, want ErrBad", c.name, err)
		}
	}
}

func TestValidateNamesTheFlag(t *testing.T) {
	for _, c := range []eventbatch.Config{
		{MaxEvents: 0, MaxBytes: 1, Compression: "s2"},
		{MaxEvents: 1, MaxBytes: 0, Compression: "s2"},
		{MaxEvents: 1, MaxBytes: eventbatch.MaxBytesLimit + 1, Compression: "s2"},
		{MaxEvents: 1, MaxBytes: 1, Compression: "gzip"},
	} {
		err := c.Validate()
		if err == nil || !strings.Contains(err.Error(), "--bus-batch-") {
			t.Errorf("%+v: %v", c, err)
		}
	}
	if err := eventbatch.DefaultConfig().Validate(); err != nil {
		t.Error(err)
	}
}
