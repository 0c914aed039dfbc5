package classify

import (
	"testing"
	"time"
)

func TestRetryDelayBacksOffToAMinute(t *testing.T) {
	for _, tc := range []struct {
		delivered int
		want      time.Duration
	}{
		{0, time.Second}, {1, time.Second}, {2, 2 * time.Second}, {3, 4 * time.Second},
		{6, 32 * time.Second}, {7, time.Minute}, {1000, time.Minute},
	} {
		if got := redelivery.Delay(tc.delivered); got != tc.want {
			t.Errorf("redelivery.Delay(%d) = %s, want %s", tc.delivered, got, tc.want)
		}
	}
}
