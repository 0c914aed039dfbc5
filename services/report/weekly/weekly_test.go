package weekly

import (
	"testing"
	"time"
)

func TestParseVersion(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Version
		bad  bool
	}{
		{"1.22", Version{1, 22}, false},
		{"v1.9", Version{1, 9}, false},
		{"1.29.3", Version{1, 29}, false},
		{" 1.16 ", Version{1, 16}, false},
		{"1", Version{}, true},
		{"1.x", Version{}, true},
		{"0.5", Version{}, true},
		{"1.2.3.4", Version{}, true},
		{"1.22-rc1", Version{}, true},
		{"", Version{}, true},
	} {
		got, err := ParseVersion(tc.in)
		if (err != nil) != tc.bad || got != tc.want {
			t.Errorf("ParseVersion(%q) = %v, %v; want %v, bad=%v", tc.in, got, err, tc.want, tc.bad)
		}
	}
}

func TestVersionOrderIsNumeric(t *testing.T) {
	v19, v116 := Version{1, 9}, Version{1, 16}
	if !v19.Less(v116) || v116.Less(v19) || v19.Ordinal() >= v116.Ordinal() {
		t.Fatal("1.9 must be before 1.16")
	}
	if !(Version{1, 99}).Less(Version{2, 0}) || (Version{2, 0}).Ordinal() <= (Version{1, 99}).Ordinal() {
		t.Fatal("1.99 must be before 2.0")
	}
}

func TestLastWeekEnding(t *testing.T) {
	for _, tc := range []struct{ now, want string }{
		{"2026-11-23T08:00:00Z", "2026-11-22"}, // Monday: yesterday
		{"2026-11-29T23:59:00Z", "2026-11-22"}, // Sunday: the week before
		{"2026-11-25T00:00:00Z", "2026-11-22"}, // Wednesday
		{"2026-11-30T00:00:00Z", "2026-11-29"}, // next Monday
	} {
		now, _ := time.Parse(time.RFC3339, tc.now)
		if got := LastWeekEnding(now).String(); got != tc.want {
			t.Errorf("LastWeekEnding(%s) = %s, want %s", tc.now, got, tc.want)
		}
	}
	// The day is taken in the location of now.
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err == nil {
		now := time.Date(2026, 11, 30, 0, 30, 0, 0, berlin) // still Sunday in UTC
		if got := LastWeekEnding(now).String(); got != "2026-11-29" {
			t.Errorf("LastWeekEnding in Berlin = %s, want 2026-11-29", got)
		}
	}
}

func TestOptionsValidate(t *testing.T) {
	ok := func() Options {
		return Options{Cluster: "c", Target: Version{1, 29}, WeekEnding: Date{time.Date(2026, 11, 22, 0, 0, 0, 0, time.UTC)}}
	}
	o := ok()
	if err := o.Validate(); err != nil || o.Table != DefaultTable || o.TrendWeeks != 8 || o.MaxCallers != 200000 || o.CallersPerBlocker != 25 || o.MaxChanges != 100 {
		t.Fatalf("defaults not filled: %+v %v", o, err)
	}
	for name, mut := range map[string]func(*Options){
		"no cluster":   func(o *Options) { o.Cluster = "" },
		"no target":    func(o *Options) { o.Target = Version{} },
		"no week":      func(o *Options) { o.WeekEnding = Date{} },
		"bad table":    func(o *Options) { o.Table = "findings; DROP TABLE x" },
		"one week":     func(o *Options) { o.TrendWeeks = 1 },
		"neg. callers": func(o *Options) { o.MaxCallers = -1 },
	} {
		o := ok()
		mut(&o)
		if err := o.Validate(); err == nil {
			t.Errorf("%s: want an error", name)
		}
	}
}

func TestAssemble(t *testing.T) {
	ing := Key{RuleID: "removed-api", APIGroup: "extensions", APIVersion: "v1beta1", Resource: "ingresses", RemovedIn: "1.22"}
	psp := Key{RuleID: "psp", APIGroup: "policy", APIVersion: "v1beta1", Resource: "podsecuritypolicies", RemovedIn: "1.25"}
	row := func(k Key, user string, n uint64, this bool) callerRow {
		return callerRow{Key: k, caller: Caller{Username: user, Count: n}, thisWeek: this}
	}
	r := &Report{}
	assemble(r, []callerRow{
		row(ing, "a", 5, true),
		row(psp, "b", 9, true),
		row(ing, "c", 7, true),
		row(ing, "a", 3, false),
		row(ing, "gone", 2, false),
		row(psp, "gone", 1, false),
	})
	if len(r.Blockers) != 2 || r.Blockers[0].Key != ing || r.Blockers[0].Findings != 12 || r.Blockers[1].Findings != 9 {
		t.Fatalf("blockers %+v", r.Blockers)
	}
	if r.Blockers[0].New || r.Blockers[1].New {
		t.Fatal("both blockers were seen the week before: not new")
	}
	if r.Blockers[0].Callers[0].New || !r.Blockers[0].Callers[1].New || !r.Blockers[1].Callers[0].New {
		t.Fatalf("caller news wrong: %+v", r.Blockers)
	}
	if len(r.New) != 2 || len(r.Resolved) != 2 || r.Resolved[0].Username != "gone" || r.Totals.BlockerCallers != 3 {
		t.Fatalf("new %+v resolved %+v callers %d", r.New, r.Resolved, r.Totals.BlockerCallers)
	}
	if got := (Key{APIVersion: "v1", Resource: "endpoints"}).API(); got != "v1 endpoints" {
		t.Fatalf("core API %q", got)
	}
	if got := (Key{RuleID: "legacy-sa-token"}).API(); got != "" {
		t.Fatalf("no API %q", got)
	}
}
