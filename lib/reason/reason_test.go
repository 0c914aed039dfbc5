package reason

import (
	"errors"
	"fmt"
	"testing"
)

func TestOf(t *testing.T) {
	tooLong := New("line longer than the size cap", TooLarge)
	wrapped := fmt.Errorf("audit.log:12: %w", tooLong)
	for _, c := range []struct {
		err  error
		want string
	}{
		{nil, ""},
		{errors.New("disk on fire"), Other},
		{tooLong, TooLarge},
		{wrapped, TooLarge},
		{fmt.Errorf("outer: %w", fmt.Errorf("inner: %w", New("x", NotJSON))), NotJSON},
		{errors.Join(errors.New("a"), New("y", Panic)), Panic},
	} {
		if got := Of(c.err); got != c.want {
			t.Errorf("Of(%v) = %q, want %q", c.err, got, c.want)
		}
	}
	if !errors.Is(wrapped, tooLong) || wrapped.Error() != "audit.log:12: line longer than the size cap" {
		t.Errorf("wrapping changed: %v", wrapped)
	}
	if errors.Is(New("same text", TooLarge), New("same text", TooLarge)) {
		t.Error("two sentinels with the same text are one")
	}
}
