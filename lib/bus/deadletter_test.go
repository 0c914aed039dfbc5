package bus

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/auditlens/auditlens/lib/reason"
)

func TestBoundID(t *testing.T) {
	short := "c/0b6f3a52-9d7e-4d2a-8f0e-1c1b2a3d4e5f/ResponseComplete"
	if BoundID(short) != short {
		t.Errorf("a normal id was changed: %q", BoundID(short))
	}
	huge := "c/" + strings.Repeat("é", 500000) + "/ResponseComplete"
	other := "c/" + strings.Repeat("é", 500000) + "/RequestReceived"
	a, b := BoundID(huge), BoundID(other)
	if len(a) > MaxIDLen || len(b) > MaxIDLen {
		t.Fatalf("bounded ids of %d and %d bytes, want at most %d", len(a), len(b), MaxIDLen)
	}
	if a == b || a != BoundID(huge) {
		t.Errorf("bounded ids not distinct or not stable: %q %q", a, b)
	}
	if !strings.HasPrefix(a, "c/é") || !strings.Contains(a, "~") {
		t.Errorf("bounded id lost its readable prefix: %q", a)
	}
}

func TestNewDeadLetterIsBounded(t *testing.T) {
	huge := strings.Repeat("x", 2<<20)
	m := NewDeadLetter("c", huge, huge, huge, errors.New(huge), []byte(huge), map[string]string{HeaderNode: huge})
	size := len(m.ID) + len(m.Data)
	for k, v := range m.Header {
		size += len(k) + len(v)
	}
	if size > DeadLetterMaxData+8<<10 {
		t.Errorf("dead letter of %d bytes built from 2 MiB values", size)
	}
	if m.Header[HeaderReasonLabel] != reason.Other {
		t.Errorf("reason label %q", m.Header[HeaderReasonLabel])
	}
	if m.Header[HeaderTruncated] != "65536 of 2097152 bytes" || m.Stream != DeadLetter {
		t.Errorf("truncation header %q, stream %s", m.Header[HeaderTruncated], m.Stream)
	}
	if err := m.Validate(); err != nil {
		t.Error(err)
	}
	if !summarize(&m) || len(m.Data) != 4<<10 || m.Header[HeaderTruncated] != "4096 of 2097152 bytes" {
		t.Errorf("first summary: %d bytes, %q", len(m.Data), m.Header[HeaderTruncated])
	}
	if !summarize(&m) || len(m.Data) != 0 || summarize(&m) {
		t.Errorf("second summary: %d bytes", len(m.Data))
	}
}

func TestDeadLetterIDAndReason(t *testing.T) {
	cause := fmt.Errorf("audit.log:7: %w", TooLargeCause(3<<20, fmt.Errorf("nats: %w", ErrTooLarge)))
	m := NewDeadLetter("prod", "file", "abc/7", "audit.log:7", cause, []byte("{}"), nil)
	if m.ID != "file/abc/7" || m.Cluster != "prod" {
		t.Errorf("id %q cluster %q", m.ID, m.Cluster)
	}
	if m.Header[HeaderReasonLabel] != reason.TooLarge || !strings.Contains(m.Header[HeaderReason], "event of 3145728 bytes is larger than the bus accepts") {
		t.Errorf("reason %q label %q", m.Header[HeaderReason], m.Header[HeaderReasonLabel])
	}
	msgs := []Message{{Stream: Events, Cluster: "prod", ID: "prod/a/ResponseComplete", Data: []byte("{}")}}
	var counted int
	dl := RefusedDeadLetter(msgs, "webhook", "webhook", "node-1", func(*Message, error) { counted++ })(0, ErrTooLarge)
	if dl.ID != "webhook/too-large/prod/a/ResponseComplete" || dl.Header[HeaderNode] != "node-1" || counted != 1 ||
		dl.Header[HeaderReasonLabel] != reason.TooLarge {
		t.Errorf("too-large dead letter %q %v, counted %d", dl.ID, dl.Header, counted)
	}
}
