package bus

import (
	"strings"
	"testing"
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
	m := NewDeadLetter("c", huge, huge, huge, []byte(huge), map[string]string{HeaderNode: huge})
	size := len(m.ID) + len(m.Data)
	for k, v := range m.Header {
		size += len(k) + len(v)
	}
	if size > DeadLetterMaxData+8<<10 {
		t.Errorf("dead letter of %d bytes built from 2 MiB values", size)
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
