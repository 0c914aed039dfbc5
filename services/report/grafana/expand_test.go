package grafana

import (
	"strings"
	"testing"
	"time"
)

func TestExpand(t *testing.T) {
	c := Context{
		From:     time.Date(2026, 11, 2, 0, 0, 0, 0, time.UTC),
		To:       time.Date(2026, 11, 29, 23, 59, 59, 0, time.UTC),
		Interval: 90 * time.Second,
		Vars:     map[string][]string{"cluster": {"prod"}, "rule": {"psp", "o'neil"}, "v": {"1.35"}},
		All:      map[string]bool{},
	}
	all := c
	all.All = map[string]bool{"rule": true}
	for _, tc := range []struct {
		in   string
		c    Context
		want string
		err  string
	}{
		{in: "WHERE $__timeFilter(event_time)", c: c, want: "WHERE event_time >= toDateTime(1793577600) AND event_time <= toDateTime(1795996799)"},
		{in: "$__fromTime, $__toTime", c: c, want: "toDateTime(1793577600), toDateTime(1795996799)"},
		{in: "$__fromTime_ms", c: c, want: "fromUnixTimestamp64Milli(1793577600000)"},
		{in: "$__dateFilter(day)", c: c, want: "day >= toDate('2026-11-02') AND day <= toDate('2026-11-29')"},
		{in: "$__dt(d, t)", c: c, want: "(d >= toDate('2026-11-02') AND d <= toDate('2026-11-29')) AND (t >= toDateTime(1793577600) AND t <= toDateTime(1795996799))"},
		{in: "$__timeInterval(event_time)", c: c, want: "toStartOfInterval(toDateTime(event_time), INTERVAL 90 second)"},
		{in: "$__interval_s", c: c, want: "90"},
		{in: "cluster = '${cluster}' AND v = '$v' AND [[cluster]]", c: c, want: "cluster = 'prod' AND v = '1.35' AND prod"},
		{in: "rule_id IN (${rule:singlequote})", c: c, want: `rule_id IN ('psp','o\'neil')`},
		{in: "rule_id IN (${rule:sqlstring})", c: c, want: `rule_id IN ('psp','o''neil')`},
		{in: "$__conditionalAll(rule_id IN (${rule:singlequote}), $rule)", c: c, want: `rule_id IN ('psp','o\'neil')`},
		{in: "$__conditionalAll(rule_id IN (${rule:singlequote}), $rule) AND x", c: all, want: "1=1 AND x"},
		{in: "'$missing'", c: c, err: "missing has no value"},
		{in: "$__timeFilter(a, b)", c: c, err: "expected 1 argument"},
		{in: "$__nope", c: c, err: "unknown macro"},
		{in: "$__timeFilter(a", c: c, err: "unbalanced"},
	} {
		got, err := Expand(tc.in, tc.c)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("Expand(%q): err %v, want %q", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("Expand(%q)\n got %q, %v\nwant %q", tc.in, got, err, tc.want)
		}
	}
}

func TestParseRejectsOtherDatasources(t *testing.T) {
	_, err := Parse([]byte(`{"panels":[{"title":"x","type":"table","datasource":{"type":"prometheus"},"targets":[{"refId":"A","expr":"up"}]}]}`))
	if err == nil || !strings.Contains(err.Error(), PluginID) {
		t.Errorf("err %v, want a datasource error", err)
	}
}
