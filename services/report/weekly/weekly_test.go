package weekly

import (
	"testing"
	"time"
)

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
		return Options{Cluster: "c", Target: Version{Major: 1, Minor: 29}, WeekEnding: Date{time.Date(2026, 11, 22, 0, 0, 0, 0, time.UTC)}}
	}
	o := ok()
	if err := o.Validate(); err != nil || o.Table != DefaultTable || o.TrendWeeks != 8 || o.CallersPerBlocker != 25 || o.MaxChanges != 100 {
		t.Fatalf("defaults not filled: %+v %v", o, err)
	}
	for name, mut := range map[string]func(*Options){
		"no cluster":   func(o *Options) { o.Cluster = "" },
		"no target":    func(o *Options) { o.Target = Version{} },
		"no week":      func(o *Options) { o.WeekEnding = Date{} },
		"bad table":    func(o *Options) { o.Table = "findings; DROP TABLE x" },
		"one week":     func(o *Options) { o.TrendWeeks = 1 },
		"neg. callers": func(o *Options) { o.CallersPerBlocker = -1 },
		"neg. changes": func(o *Options) { o.MaxChanges = -1 },
	} {
		o := ok()
		mut(&o)
		if err := o.Validate(); err == nil {
			t.Errorf("%s: want an error", name)
		}
	}
}

func TestKeyAPI(t *testing.T) {
	for _, tc := range []struct {
		k    Key
		want string
	}{
		{Key{APIGroup: "extensions", APIVersion: "v1beta1", Resource: "ingresses"}, "extensions/v1beta1 ingresses"},
		{Key{APIVersion: "v1", Resource: "endpoints"}, "v1 endpoints"},
		{Key{RuleID: "legacy-sa-token"}, ""},
		{Key{APIGroup: "policy", APIVersion: "v1beta1"}, "policy/v1beta1"},
	} {
		if got := tc.k.API(); got != tc.want {
			t.Errorf("%+v.API() = %q, want %q", tc.k, got, tc.want)
		}
	}
}
