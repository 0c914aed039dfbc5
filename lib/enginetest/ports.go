package enginetest

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// Ports below the kernel's ephemeral range are never handed out as the source port of an
// outgoing connection. A port from net.Listen(":0") is: between the probe and the engine's
// own bind, any client on the machine (another test package's ClickHouse or NATS clients, in
// CI's parallel jobs) may take it as its source port, and the engine then fails with
// "Address already in use". FreePorts therefore draws from below the ephemeral range, where
// only a process that asks for that very port can take it.
const lowestPort = 10000

var (
	portsMu sync.Mutex
	given   = map[int]bool{} // ports this process handed out: never twice
)

// FreePorts returns n distinct loopback TCP ports that nothing listens on, for engines a test
// starts (clickhouse-server, nats-server, ZooKeeper, mailpit, kube-apiserver).
func FreePorts(n int) ([]int, error) {
	portsMu.Lock()
	defer portsMu.Unlock()
	lo, hi := lowestPort, ephemeralLow()
	var ports []int
	for tries := 0; len(ports) < n; tries++ {
		if tries > 1000 {
			return nil, fmt.Errorf("no free loopback port in [%d, %d) after %d tries", lo, hi, tries)
		}
		p := lo + rand.IntN(hi-lo)
		if hi <= lo {
			p = 0 // an unusual ephemeral range: let the kernel choose
		}
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err != nil {
			continue
		}
		p = l.Addr().(*net.TCPAddr).Port
		_ = l.Close()
		if given[p] {
			continue
		}
		given[p] = true
		ports = append(ports, p)
	}
	return ports, nil
}

// FreePort is one of FreePorts.
func FreePort() (int, error) {
	ports, err := FreePorts(1)
	if err != nil {
		return 0, err
	}
	return ports[0], nil
}

// FreeAddr is 127.0.0.1:port for a FreePort, failing t if there is none.
func FreeAddr(t testing.TB) string {
	t.Helper()
	p, err := FreePort()
	if err != nil {
		t.Fatal(err)
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(p))
}

// ephemeralLow is the first port of the kernel's ephemeral range (32768 on Linux by
// default).
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 32768
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 32768
	}
	v, err := strconv.Atoi(f[0])
	if err != nil {
		return 32768
	}
	return v
}
