package page

import (
	"testing"

	"github.com/auditlens/auditlens/services/report/chtest"
)

// TestMain closes the shared chDB session, then fails the package's tests when a goroutine
// they started is still running.
func TestMain(m *testing.M) { chtest.Main(m) }
