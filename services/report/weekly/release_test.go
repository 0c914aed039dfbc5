package weekly

import (
	"testing"
)

func TestMarkFailingNow(t *testing.T) {
	mk := func(removed string) Blocker {
		return Blocker{Key: Key{RuleID: "removed-api", Resource: removed, RemovedIn: removed}}
	}
	order := func(bs []Blocker) (s string) {
		for _, b := range bs {
			mark := "+"
			if b.FailingNow {
				mark = "!"
			}
			s += mark + b.RemovedIn + " "
		}
		return s
	}
	cases := []struct {
		current string
		want    string
		breaks  int
	}{
		// Unknown release: nothing fails already, the order is kept.
		{"", "+1.22 +1.38 +1.25 +bad ", 4},
		// 1.37: 1.22 and 1.25 fail already and go last, in their order; a removal that does
		// not parse is never taken for one that fails already.
		{"1.37", "+1.38 +bad !1.22 !1.25 ", 2},
		// and what the upgrade breaks comes by the release that removes it, the first hop first.
		{"1.22", "+1.25 +1.38 +bad !1.22 ", 3},
	}
	for _, c := range cases {
		bs := []Blocker{mk("1.22"), mk("1.38"), mk("1.25"), mk("bad")}
		var cur Version
		if c.current != "" {
			cur = mustVersion(t, c.current)
		}
		breaks, failing := MarkFailingNow(bs, cur)
		if got := order(bs); got != c.want || breaks != c.breaks || failing != 4-c.breaks {
			t.Errorf("current %q: %s (%d, %d), want %s (%d)", c.current, got, breaks, failing, c.want, c.breaks)
		}
		b, f := PartsOf(bs)
		if len(b) != breaks || len(f) != failing {
			t.Errorf("current %q: PartsOf %d and %d", c.current, len(b), len(f))
		}
	}
}

func mustVersion(t *testing.T, s string) Version {
	t.Helper()
	v, err := ParseVersion(s)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func TestHops(t *testing.T) {
	mk := func(api, removed string) Blocker {
		return Blocker{Key: Key{RuleID: "removed-api", Resource: api, RemovedIn: removed}}
	}
	bs := []Blocker{mk("a", "1.38"), mk("b", "1.22"), mk("c", "1.36"), mk("d", "1.38"), mk("e", "1.35")}
	MarkFailingNow(bs, mustVersion(t, "1.35"))
	hops := Hops(bs, mustVersion(t, "1.35"), mustVersion(t, "1.38"))
	got := ""
	for _, h := range hops {
		got += h.Release.String() + ":"
		for _, b := range h.Blockers {
			got += b.Resource
		}
		got += " "
	}
	if want := "1.36:c 1.37: 1.38:ad "; got != want {
		t.Errorf("hops %q, want %q", got, want)
	}
	// The first hop's blockers come first, then the later hops', then what fails already.
	order := ""
	for _, b := range bs {
		order += b.Resource
	}
	if order != "cadbe" {
		t.Errorf("order %q, want cadbe", order)
	}
	if Hops(bs, Version{}, mustVersion(t, "1.38")) != nil || Hops(bs, mustVersion(t, "1.38"), mustVersion(t, "1.38")) != nil {
		t.Error("hops without a release to start from, or without a step")
	}
}
