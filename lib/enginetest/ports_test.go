package enginetest

import (
	"net"
	"strconv"
	"testing"
)

func TestFreePortsAreDistinctListenableAndBelowTheEphemeralRange(t *testing.T) {
	ports, err := FreePorts(50)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int]bool{}
	for _, p := range ports {
		if seen[p] {
			t.Fatalf("port %d handed out twice", p)
		}
		seen[p] = true
		if lo := ephemeralLow(); lo > lowestPort && (p < lowestPort || p >= lo) {
			t.Errorf("port %d outside [%d, %d)", p, lowestPort, lo)
		}
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err != nil {
			t.Fatalf("port %d: %v", p, err)
		}
		_ = l.Close()
	}
	again, err := FreePort()
	if err != nil {
		t.Fatal(err)
	}
	if seen[again] {
		t.Errorf("port %d handed out again", again)
	}
}
