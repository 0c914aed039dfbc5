package rollup

import (
	"context"
	"strings"
	"testing"
	"time"
)

func TestBoundedCarriesTheDeadline(t *testing.T) {
	if got := Bounded(context.Background(), "SELECT 1"); got != "SELECT 1" {
		t.Errorf("without a deadline: %q", got)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	if got := Bounded(ctx, "SELECT 1"); !strings.HasSuffix(got, "SETTINGS max_execution_time = 2") {
		t.Errorf("with 1.5 s left: %q", got)
	}
}
