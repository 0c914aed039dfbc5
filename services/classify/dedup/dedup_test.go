package dedup

import (
	"fmt"
	"testing"
)

func TestFirstTimeOncePerKey(t *testing.T) {
	w := New(10)
	if !w.FirstTime("c/a/r") || w.FirstTime("c/a/r") {
		t.Fatal("want true then false")
	}
	if !w.FirstTime("c/a/other") {
		t.Fatal("another rule of the same event is new")
	}
}

func TestWindowIsBoundedAndKeepsTheRecentHalf(t *testing.T) {
	w := New(100)
	for i := range 1000 {
		w.Add(fmt.Sprint(i))
		if w.Len() > 100 {
			t.Fatalf("window holds %d keys, bound is 100", w.Len())
		}
	}
	for i := 950; i < 1000; i++ {
		if !w.Seen(fmt.Sprint(i)) {
			t.Fatalf("key %d of the last 50 forgotten", i)
		}
	}
	if w.Seen("0") {
		t.Fatal("oldest key still remembered")
	}
}

func TestSeenDoesNotAdd(t *testing.T) {
	w := New(10)
	first, second := w.Seen("k"), w.Seen("k")
	if first || second {
		t.Fatal("Seen added the key")
	}
	w.Add("k")
	if !w.Seen("k") {
		t.Fatal("Add did not add")
	}
}

func TestKey(t *testing.T) {
	for _, c := range []struct {
		received int64
		want     string
	}{
		{0, "prod/id-1/psp"},
		{1764583200, "prod/id-1/psp/1764583200"},
	} {
		if got := Key("prod", "id-1", "psp", c.received); got != c.want {
			t.Errorf("Key(..., %d) = %q, want %q", c.received, got, c.want)
		}
	}
}
