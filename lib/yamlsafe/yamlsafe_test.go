package yamlsafe

import (
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
)

// flatFlow is a flow sequence of n one-digit items on one line: two tokens per item.
func flatFlow(n int) []byte {
	return []byte("[" + strings.Repeat("1,", n-1) + "1]\n")
}

// Every hostile input of review 3 (E1, E2), generated here, ends with a clear error, fast,
// before the parser holds it.
func TestRefusesBeforeTheParserHoldsIt(t *testing.T) {
	laughs := "a0: &a0 [\"lol\"]\n"
	for l := 1; l <= 9; l++ {
		laughs += "a" + strconv.Itoa(l) + ": &a" + strconv.Itoa(l) + " [" + strings.TrimSuffix(strings.Repeat("*a"+strconv.Itoa(l-1)+",", 9), ",") + "]\n"
	}
	var deepBlock strings.Builder
	for i := range 200 {
		deepBlock.WriteString(strings.Repeat(" ", i) + "k" + strconv.Itoa(i) + ":\n")
	}
	for _, c := range []struct {
		name  string
		data  []byte
		l     Limits
		want  error
		words string
	}{
		{"200 KB of [ (an acknowledgements file)", []byte(strings.Repeat("[", 200<<10)), Config, ErrTooDeep, "levels of brackets"},
		{"200 levels of block mappings", []byte(deepBlock.String()), Config, ErrTooDeep, "levels"},
		{"a 16 MiB flat list (an owners file)", []byte("teams:\n" + strings.Repeat("- a\n", 4<<20)), Config, ErrTooLarge, "bytes, more than"},
		{"a 3 MiB flat block list", []byte("teams:\n" + strings.Repeat("- a\n", 3<<18)), Config, ErrTooLarge, "tokens"},
		{"a 4 MiB flat flow sequence (a manifest)", flatFlow(2 << 20), Manifests, ErrTooLarge, "tokens"},
		{"a 50 MiB flat flow sequence (a Helm release)", flatFlow(25 << 20), Manifests, ErrTooLarge, "tokens"},
		{"billion laughs", []byte(laughs), Config, ErrAliasExpansion, "aliases expand"},
	} {
		t.Run(c.name, func(t *testing.T) {
			start := time.Now()
			f, err := Parse(c.data, c.l)
			if !errors.Is(err, c.want) || !strings.Contains(err.Error(), c.words) {
				t.Fatalf("Parse: %v (%v), want %v naming %q", err, f != nil, c.want, c.words)
			}
			if d := time.Since(start); d > 30*time.Second {
				t.Errorf("refused after %s", d) // the review's bound; a refusal takes milliseconds
			}
		})
	}
}

// The scan counts at least the tokens the lexer makes, so MaxTokens bounds what the parser
// holds; real files are far inside the limits.
func TestScanCountsAtLeastTheLexersTokens(t *testing.T) {
	var files []string
	for _, glob := range []string{"../../examples/*.yaml", "../../services/classify/rules/*.yaml", "../../services/classify/manifests/testdata/*.yaml", "../../deploy/kubernetes/*/*/*.yaml"} {
		m, _ := filepath.Glob(glob)
		files = append(files, m...)
	}
	if len(files) < 10 {
		t.Fatalf("%d files found: the check proves little", len(files))
	}
	for _, name := range files {
		data, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		toks, err := tokenize(data, 1000)
		if err != nil {
			continue // not YAML the lexer reads (a template): nothing to compare
		}
		if s := scan(data, Limits{MaxDepth: 1000, MaxTokens: 1 << 30}); s.tokens < len(toks) {
			t.Errorf("%s: scan counts %d tokens, the lexer makes %d", name, s.tokens, len(toks))
		}
		if _, err := Parse(data, Config); err != nil && (errors.Is(err, ErrTooLarge) || errors.Is(err, ErrTooDeep)) {
			t.Errorf("%s refused within Config: %v", name, err)
		}
	}
}

// BenchmarkParseAtTheTokenBound measures what the parser holds for the largest inputs the
// limits admit (a flat flow sequence just under MaxTokens, the costliest shape per token):
// the peak heap is reported as peak-MB; it must stay under 1 GB for Manifests.
func BenchmarkParseAtTheTokenBound(b *testing.B) {
	for _, c := range []struct {
		name string
		l    Limits
	}{{"config", Config}, {"manifests", Manifests}} {
		b.Run(c.name, func(b *testing.B) {
			data := flatFlow(c.l.MaxTokens/2 - 2)
			if len(data) > c.l.MaxBytes {
				data = flatFlow(c.l.MaxBytes/2 - 2)
			}
			var peak uint64
			for range b.N {
				runtime.GC()
				var before runtime.MemStats
				runtime.ReadMemStats(&before)
				done := make(chan struct{})
				var max uint64
				go func() {
					var m runtime.MemStats
					for {
						select {
						case <-done:
							return
						case <-time.After(20 * time.Millisecond):
							runtime.ReadMemStats(&m)
							max = maxU(max, m.HeapInuse-before.HeapInuse)
						}
					}
				}()
				f, err := Parse(data, c.l)
				if err != nil {
					b.Fatal(err)
				}
				var m runtime.MemStats
				runtime.ReadMemStats(&m)
				close(done)
				peak = maxU(peak, maxU(max, m.HeapInuse-before.HeapInuse))
				runtime.KeepAlive(f)
			}
			b.ReportMetric(float64(peak)/(1<<20), "peak-MB")
			b.ReportMetric(float64(len(data))/(1<<20), "input-MB")
		})
	}
}

func maxU(a, b uint64) uint64 {
	if a > b {
		return a
	}
	return b
}
