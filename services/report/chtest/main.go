package chtest

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"
)

// Main is the TestMain of a package that uses the engines: it runs the tests, closes the
// shared chDB session, then fails the binary on leaked goroutines (clickhouse-go's idle
// connection janitor, which outlives Close by up to a tick, excepted).
func Main(m *testing.M, ignore ...goleak.Option) {
	code := m.Run()
	CleanupEmbedded()
	if code == 0 {
		opts := append([]goleak.Option{goleak.IgnoreCurrent(),
			goleak.IgnoreTopFunction("github.com/ClickHouse/clickhouse-go/v2.(*clickhouse).startAutoCloseIdleConnections")}, ignore...)
		if err := goleak.Find(opts...); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}
