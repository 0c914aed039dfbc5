package scan

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/auditlens/auditlens/services/classify/rules"
)

// hostileLong is an event whose user agent, user and object name are long, wide (CJK) and
// hold control characters, as an attacker may write them.
func hostileLong() string {
	return strings.NewReplacer(
		`"userAgent":"helm/v3.8.0"`, `"userAgent":"`+strings.Repeat("very-long-agent/1.0 ", 15)+`\u001b[2J"`,
		`"username":"ci-bot"`, `"username":"system:serviceaccount:`+strings.Repeat("名前空間", 12)+`:deployer\nFAKE"`,
		`"namespace":"x"`, `"namespace":"`+strings.Repeat("team-", 20)+`"`,
	).Replace(removedEv)
}

// The table and its summary fit the terminal, whatever the values: every line of stdout
// takes at most the width in runes and in terminal cells (a CJK rune takes two), with the
// rule, API, verb, user and counts still shown.
func TestTableFitsTheWidth(t *testing.T) {
	inputs := append(inputsOf(t), write(t, "hostile.log", hostileLong()+"\n"+podMetaEv+"\n"))
	for _, width := range []string{"80", "120"} {
		for _, groupBy := range []string{"api", "caller"} {
			t.Setenv("COLUMNS", width)
			code, out, errOut := run(t, "", append([]string{"--format", "table", "--group-by", groupBy}, inputs...)...)
			if code != ExitRemoved {
				t.Fatalf("exit %d: %s", code, errOut)
			}
			w := map[string]int{"80": 80, "120": 120}[width]
			for i, l := range strings.Split(out, "\n") {
				if n := utf8.RuneCountInString(l); n > w || cells(l) > w {
					t.Errorf("COLUMNS=%s, group by %s: line %d is %d runes, %d cells:\n%s", width, groupBy, i+1, n, cells(l), l)
				}
			}
			for _, want := range []string{"RULE", "API", "VERB", "USER", "removed-api", "legacy-sa-token", "/v1beta1 leases", "update",
				"system:node:hw1", "the table is cut to " + width + " columns: --format wide"} {
				if !strings.Contains(out, want) {
					t.Errorf("COLUMNS=%s, group by %s: %q missing:\n%s", width, groupBy, want, out)
				}
			}
			if strings.ContainsAny(out, "\x1b\r") || strings.Contains(out, "\nFAKE") {
				t.Errorf("raw control characters:\n%q", out)
			}
		}
	}
	// Not a terminal and no COLUMNS: 120.
	t.Setenv("COLUMNS", "")
	_, out, _ := run(t, "", append([]string{"--format", "table"}, inputs...)...)
	if !strings.Contains(out, "cut to 120 columns") {
		t.Errorf("default width:\n%s", out)
	}
}

// --format wide holds every value in full, as the table did before it was fitted.
func TestWideHasEveryValue(t *testing.T) {
	t.Setenv("COLUMNS", "80")
	_, out, _ := run(t, "", append([]string{"--format", "wide"}, inputsOf(t)...)...)
	for _, want := range []string{
		"system:serviceaccount:openshift-kube-storage-version-migrator-operator:kube-storage-version-migrator-operator",
		"cluster-kube-storage-version-migrator-operator/v0.0.0 (linux/amd64) kubernetes/$Format",
		"openshift-kube-storage-version-migrator/openshift-kube-storage-version-migrator",
		"TIME", "SEVERITY", "OBJECT", "USER AGENT",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("wide lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "…") || strings.Contains(out, "cut to") {
		t.Errorf("wide cut something:\n%s", out)
	}
}

func TestFitWidths(t *testing.T) {
	var natural colWidths
	for i, c := range columns {
		natural[i] = len(c.name)
	}
	if got := fitWidths(natural, 120); got != natural {
		t.Errorf("what fits is not cut: %v", got)
	}
	natural = colWidths{20, 8, 15, 7, 41, 6, 80, 109, 86} // the real-world corpus
	for width := minWidth; width <= 400; width++ {
		w := fitWidths(natural, width)
		used, shown := -gap, 0
		for i, c := range columns {
			if w[i] > 0 {
				used += w[i] + gap
				shown++
			}
			if !c.optional() && w[i] < min(natural[i], c.min) && width >= 80 {
				t.Errorf("width %d: %s is %d wide, below its minimum", width, c.name, w[i])
			}
		}
		if used > width {
			t.Errorf("width %d: %d used (%v)", width, used, w)
		}
		for _, i := range []int{2, 4, 5, 7} { // rule, API, verb, user
			if w[i] == 0 {
				t.Errorf("width %d: %s left out", width, columns[i].name)
			}
		}
		if width == 120 && (w[0] != 20 || w[2] != 15 || w[5] != 6 || w[4] < 30 || w[7] < 30) {
			t.Errorf("width 120: %v, want the time, the whole rule and verb, API and user at least 30", w)
		}
		if width == 80 && (w[2] != 15 || w[5] != 6 || w[4] < 24 || w[7] < 24) {
			t.Errorf("width 80: %v, want the whole rule and verb, API and user at least 24", w)
		}
	}
}

// A rule id is never cut: it is what a reader copies into an acknowledgement or a search. The
// RULE column's minimum holds the longest id of the catalogue, and at 80 columns the longest
// id prints whole beside a readable API and user.
func TestRuleIDsAreNeverCut(t *testing.T) {
	cat, err := rules.Load()
	if err != nil {
		t.Fatal(err)
	}
	longest := 0
	for _, r := range cat.Rules {
		longest = max(longest, len(r.ID))
	}
	if columns[2].name != "RULE" || columns[2].min < longest {
		t.Fatalf("the RULE column's minimum %d is below the longest rule id (%d)", columns[2].min, longest)
	}
	natural := colWidths{20, 8, longest, 7, 41, 6, 80, 109, 86}
	w := fitWidths(natural, 80)
	if w[2] != longest || w[4] < 20 || w[7] < 16 {
		t.Errorf("width 80: %v, want the whole rule (%d), API at least 20, user at least 16", w, longest)
	}
}

func TestCutsAndWrap(t *testing.T) {
	for _, c := range []struct {
		cut  func(string, int) string
		in   string
		w    int
		want string
	}{
		{cutEnd, "kubelet/v1.14.0 (linux/amd64)", 12, "kubelet/v1.…"},
		{cutEnd, "short", 12, "short"},
		{cutEnd, "日本語のユーザー", 7, "日本語…"},
		{cutMiddle, "system:serviceaccount:ns:deployer", 15, "system:…eployer"},
		{cutMiddle, "名前空間:deployer", 9, "名前…oyer"},
		{cutAPI, "coordination.k8s.io/v1beta1 leases", 24, "coordina…/v1beta1 leases"},
		{cutAPI, "monitoring.coreos.com/v1 prometheusrules", 12, "monit…srules"},
	} {
		got := c.cut(c.in, c.w)
		if got != c.want || cells(got) > c.w {
			t.Errorf("cut(%q, %d) = %q (%d cells), want %q", c.in, c.w, got, cells(got), c.want)
		}
	}
	msg := "    what to do: " + strings.Repeat("word ", 30) + strings.Repeat("x", 100) + " 日本語のユーザーエージェント"
	lines := wrap(msg, 40, 6)
	for i, l := range lines {
		if cells(l) > 40 || (i > 0 && !strings.HasPrefix(l, "      ")) {
			t.Errorf("wrapped line %d: %q", i, l)
		}
	}
	if got := strings.Join(strings.Fields(strings.Join(lines, " ")), ""); got != strings.Join(strings.Fields(msg), "") {
		t.Errorf("wrap lost text: %q", lines)
	}
	if got := wrap("as it is", 0, 4); len(got) != 1 || got[0] != "as it is" {
		t.Errorf("no width: %q", got)
	}
}

// The summary grouped by caller: each caller with what it called, those with findings that
// block the upgrade first.
func TestGroupByCaller(t *testing.T) {
	other := strings.NewReplacer(`"auditID":"a1"`, `"auditID":"a2"`).Replace(removedEv)
	f := write(t, "audit.log", deprecatedEv+"\n"+removedEv+"\n"+other+"\n")
	_, _, errOut := run(t, "", "--group-by", "caller", "--target-version", "1.25", f)
	want := "\nci-bot  helm/v3.8.0: 2 findings, 2 blocking\n" +
		"  removed-api (critical) policy/v1beta1 poddisruptionbudgets: 2, deprecated in 1.21, removed in 1.25, use policy/v1  [blocks 1.25]\n" +
		"\nold-proxy: 1 finding\n" +
		"  deprecated-api (info) v1 endpoints: 1, deprecated in 1.33, use discovery.k8s.io/v1 EndpointSlice\n"
	if !strings.Contains(errOut, want) {
		t.Errorf("summary by caller:\n%s\nwant:\n%s", errOut, want)
	}
	if code, _, errOut := run(t, "", "--group-by", "user", f); code != ExitError || !strings.Contains(errOut, `--group-by "user": want api or caller`) {
		t.Errorf("--group-by user: exit %d, %s", code, errOut)
	}
}

func TestHelpAndFlagErrors(t *testing.T) {
	code, _, errOut := run(t, "", "--help")
	if code != ExitClean {
		t.Fatalf("--help: exit %d", code)
	}
	for _, want := range []string{"--format", "wide", "markdown", "$COLUMNS", "--group-by", "AUDITLENS_GROUP_BY", "--parallel", "AUDITLENS_PARALLEL"} {
		if !strings.Contains(errOut, want) {
			t.Errorf("--help lacks %q:\n%s", want, errOut)
		}
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--format", "xml", "x"}, `classify scan: --format "xml": want json, table, wide, markdown, sarif or junit` + "\n"},
		{[]string{"--parallel", "-1", "x"}, "classify scan: --parallel -1: want 0 or more (0: one per core)\n"},
	} {
		if code, _, errOut := run(t, "", c.args...); code != ExitError || errOut != c.want {
			t.Errorf("%v: exit %d, %q, want %q", c.args, code, errOut, c.want)
		}
	}
}
