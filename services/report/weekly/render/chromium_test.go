package render

import (
	"bytes"
	"context"
	"encoding/base64"
	"html/template"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"

	"github.com/auditlens/auditlens/lib/enginetest"
	"github.com/auditlens/auditlens/services/report/weekly/chart"
	"github.com/auditlens/auditlens/services/report/weekly/fixture"
)

// TestRendersInChromium opens the HTML report (hostile audit data, charts as data: URLs) in
// headless Debian chromium and checks what a reader sees: the blockers table, the charts,
// and no script from the data run. The screenshot goes to testdata/report.png with -update,
// else to a temporary directory.
func TestRendersInChromium(t *testing.T) {
	bin, err := exec.LookPath("chromium")
	if err != nil {
		enginetest.Unavailable(t, "chromium", err)
	}
	r := fixture.Report()
	daily, err := chart.Daily(r)
	if err != nil {
		t.Fatal(err)
	}
	weeklyPNG, err := chart.Weekly(r)
	if err != nil {
		t.Fatal(err)
	}
	img := Images{
		Daily:  template.URL("data:image/png;base64," + base64.StdEncoding.EncodeToString(daily)),
		Weekly: template.URL("data:image/png;base64," + base64.StdEncoding.EncodeToString(weeklyPNG)),
	}
	var buf bytes.Buffer
	if err := HTML(&buf, r, img); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	file := filepath.Join(dir, "report.html")
	if err := os.WriteFile(file, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	actx, acancel := chromedp.NewExecAllocator(ctx,
		chromedp.ExecPath(bin),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(filepath.Join(dir, "profile")),
		chromedp.WindowSize(1200, 900),
	)
	defer acancel()
	bctx, bcancel := chromedp.NewContext(actx)
	defer bcancel()

	// A script from the data that ran alert() would open a dialog: record and close it.
	var mu sync.Mutex
	var dialogs []string
	opened := make(chan string, 16)
	if err := chromedp.Listen(bctx, func(ev any) {
		if d, ok := ev.(*page.EventJavascriptDialogOpening); ok {
			select {
			case opened <- d.Message:
			default:
			}
		}
	}); err != nil {
		enginetest.Unavailable(t, "chromium", err)
	}
	go func() {
		for {
			select {
			case <-bctx.Done():
				return
			case m := <-opened:
				mu.Lock()
				dialogs = append(dialogs, m)
				mu.Unlock()
				_, _ = chromedp.Call(bctx, page.HandleJavaScriptDialog, page.HandleJavaScriptDialogParams{Accept: true})
			}
		}
	}()
	if err := chromedp.Do(bctx, chromedp.Navigate("file://"+file)); err != nil {
		enginetest.Unavailable(t, "chromium", err)
	}

	rows, err := chromedp.Run(bctx, chromedp.Evaluate[int](`document.querySelectorAll("#blockers > tbody > tr.blocker").length`))
	if err != nil {
		t.Fatal(err)
	}
	if rows != len(r.Blockers) {
		t.Errorf("%d blocker rows rendered, want %d", rows, len(r.Blockers))
	}
	callers, err := chromedp.Run(bctx, chromedp.Evaluate[int](`document.querySelectorAll("tr.caller").length`))
	if err != nil {
		t.Fatal(err)
	}
	if callers != 5 {
		t.Errorf("%d caller rows rendered, want 5", callers)
	}
	scripts, err := chromedp.Run(bctx, chromedp.Evaluate[int](`document.querySelectorAll("script, [onload], [onerror]").length`))
	if err != nil {
		t.Fatal(err)
	}
	if scripts != 0 {
		t.Errorf("%d script elements or handlers in the DOM, want none", scripts)
	}
	title, err := chromedp.Run(bctx, chromedp.Title())
	if err != nil {
		t.Fatal(err)
	}
	if title != Subject(r) {
		t.Errorf("title %q: a script from the data may have run", title)
	}
	// The hostile user agent is shown as text.
	found, err := chromedp.Run(bctx, chromedp.Evaluate[bool](`[...document.querySelectorAll("td.ua")].some(td => td.textContent === "<script>alert(1)</script>")`))
	if err != nil {
		t.Fatal(err)
	}
	if !found {
		t.Error("the hostile user agent is not displayed as text")
	}
	for _, id := range []string{"chart-daily", "chart-weekly"} {
		w, err := chromedp.Run(bctx, chromedp.Evaluate[int](`document.getElementById("`+id+`").naturalWidth`))
		if err != nil {
			t.Fatal(err)
		}
		if w != chart.Width {
			t.Errorf("%s natural width %d, want %d (image not decoded?)", id, w, chart.Width)
		}
	}
	shot, err := chromedp.Run(bctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	if len(dialogs) > 0 {
		t.Errorf("scripts from the data opened dialogs: %q", dialogs)
	}
	mu.Unlock()
	out := filepath.Join(dir, "report.png")
	if *update {
		out = filepath.Join("testdata", "report.png")
	}
	if err := os.WriteFile(out, shot, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s", out)
}
