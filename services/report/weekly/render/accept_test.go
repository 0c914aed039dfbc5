package render_test

import (
	"bytes"
	"strings"
	"testing"

	"github.com/auditlens/auditlens/services/report/weekly"
	"github.com/auditlens/auditlens/services/report/weekly/fixture"
	"github.com/auditlens/auditlens/services/report/weekly/render"
)

// TestAcceptedRisksAreListedApart: an accepted blocker is listed under "Accepted risks" with
// its expiry, an expired acceptance is flagged on its blocker, and notices are listed, in
// HTML (hostile API names escaped) and in text.
func TestAcceptedRisksAreListedApart(t *testing.T) {
	r := fixture.Report()
	until, _ := weekly.ParseDate("2027-01-31")
	acc := r.Blockers[1]
	acc.Resource = fixture.ScriptAgent
	r.Accepted = []weekly.Accepted{{Blocker: acc, Acceptance: weekly.Acceptance{Until: until, By: "jane@example.com",
		Reason: "legacy tenant", Source: "acks.yaml:4"}}}
	r.Blockers = []weekly.Blocker{r.Blockers[0]}
	expired, _ := weekly.ParseDate("2026-11-30")
	r.Blockers[0].Expired = &weekly.Acceptance{Until: expired, By: "web@example.com", Source: "acks.yaml:12"}
	r.Notices = []weekly.Notice{{Source: "acks.yaml:20", Message: "has no expiry: it accepts its blockers forever; give it an expires day"}}

	var h bytes.Buffer
	if err := render.Page(&h, r, render.Images{}, nil); err != nil {
		t.Fatal(err)
	}
	html := h.String()
	for _, want := range []string{`<table id="accepted">`, "until 2027-01-31 by jane@example.com", "legacy tenant",
		"Accepted until 2026-11-30 by web@example.com (acks.yaml:12): expired, blocks again.", `<ul id="notices">`,
		"acks.yaml:20</code>: has no expiry", `id="total-blockers">1<`} {
		if !strings.Contains(html, want) {
			t.Errorf("HTML lacks %q", want)
		}
	}
	if strings.Contains(html, fixture.ScriptAgent) {
		t.Error("HTML holds the accepted blocker's hostile resource unescaped")
	}
	var tx bytes.Buffer
	if err := render.Text(&tx, r); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"ACCEPTED RISKS (not blocking)", "accepted until 2027-01-31 by jane@example.com: legacy tenant (acks.yaml:4)",
		"ACCEPTED UNTIL 2026-11-30 by web@example.com (acks.yaml:12): EXPIRED, blocks again", "ACKNOWLEDGEMENTS TO REVIEW", "acks.yaml:20: has no expiry"} {
		if !strings.Contains(tx.String(), want) {
			t.Errorf("text lacks %q:\n%s", want, tx.String())
		}
	}
}
