package manifests

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	auditlensv1 "github.com/auditlens/auditlens/proto/auditlens/v1"
	"github.com/auditlens/auditlens/services/classify/rules"
)

// laughs is the classic alias bomb in a ConfigMap: levels lines, each a list of width aliases
// of the line before (nine levels of nine: 9^9 strings once expanded, from about 500 bytes).
func laughs(levels, width int) string {
	var b strings.Builder
	b.WriteString("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: lol}\na0: &a0 [\"lol\"]\n")
	for l := 1; l <= levels; l++ {
		b.WriteString("a" + strconv.Itoa(l) + ": &a" + strconv.Itoa(l) + " [")
		for i := range width {
			if i > 0 {
				b.WriteString(",")
			}
			b.WriteString("*a" + strconv.Itoa(l-1))
		}
		b.WriteString("]\n")
	}
	return b.String()
}

// podSpecBomb hides levels of two aliases each inside a Deployment's pod template, where the
// rules read labels and annotations.
func podSpecBomb(levels int) string {
	var b strings.Builder
	b.WriteString("apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web}\nspec:\n  template:\n    metadata:\n      annotations:\n        x0: &x0 \"lol\"\n")
	for l := 1; l <= levels; l++ {
		n, p := strconv.Itoa(l), strconv.Itoa(l-1)
		b.WriteString("        x" + n + ": &x" + n + " [*x" + p + ", *x" + p + "]\n")
	}
	b.WriteString("    spec:\n      containers: [{name: c, image: nginx}]\n")
	return b.String()
}

// TestHostileYAML: documents that would take gigabytes to decode (alias bombs, deep nesting)
// end with an error naming the file and why, through files and stdin alike, and the other
// documents of the file are still checked.
func TestHostileYAML(t *testing.T) {
	cronJob := "\n---\napiVersion: batch/v1beta1\nkind: CronJob\nmetadata: {name: c}\n"
	cases := []struct {
		name, doc, why string
	}{
		{"nine levels of nine aliases", laughs(9, 9), "aliases expand too much"},
		{"23 levels of two aliases in a pod spec", podSpecBomb(23), "aliases expand too much"},
		{"200 KB of [", strings.Repeat("[", 200<<10), "nested too deeply"},
		{"200 KB of {", strings.Repeat("{a: ", 50<<10), "nested too deeply"},
		{"block nesting", deepBlock(MaxDepth + 1), "nested too deeply"},
		{"block sequences on one line", strings.Repeat("- ", MaxDepth+1) + "x\n", "nested too deeply"},
	}
	dir := t.TempDir()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if tc.name == "nine levels of nine aliases" && len(tc.doc) > 600 {
				t.Fatalf("the bomb is %d bytes", len(tc.doc))
			}
			file := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "-")+".yaml")
			if err := os.WriteFile(file, []byte(tc.doc+cronJob), 0o644); err != nil {
				t.Fatal(err)
			}
			for _, args := range [][]string{{file}, {"-"}} {
				name := file
				if args[0] == "-" {
					name = "stdin"
				}
				fs, errOut, code := run(t, tc.doc+cronJob, args...)
				if code != 3 {
					t.Errorf("%s: exit %d, want 3 (the CronJob after the bomb is still found)", name, code)
				}
				if want := name + ": document 1 (line 1): " + tc.why; !strings.Contains(errOut, want) {
					t.Errorf("stderr lacks %q:\n%s", want, errOut)
				}
				if len(fs) != 1 || fs[0].Source != name+"#2" {
					t.Errorf("%s: findings %+v, want the CronJob's", name, fs)
				}
			}
		})
	}
}

func deepBlock(levels int) string {
	var b strings.Builder
	for l := range levels {
		b.WriteString(strings.Repeat(" ", l) + "k:\n")
	}
	b.WriteString(strings.Repeat(" ", levels) + "v\n")
	return b.String()
}

// TestAnchorsAndDepthAllowed: anchors used as people use them, and nesting as deep as a CRD
// schema's, decode as before.
func TestAnchorsAndDepthAllowed(t *testing.T) {
	anchors := "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web, labels: &l {app: web}}\nspec:\n  selector: {matchLabels: *l}\n" +
		"  template:\n    metadata: {labels: {<<: *l, tier: front}}\n    spec:\n      nodeSelector: {failure-domain.beta.kubernetes.io/zone: a}\n      containers: [{name: c, image: nginx}]\n"
	if fs, errOut, code := run(t, anchors, "-"); code != 2 || len(fs) != 1 || fs[0].RuleID != "beta-node-label" {
		t.Errorf("anchors: exit %d, %+v, %s", code, fs, errOut)
	}
	deep := "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: deep}\ndata:\n" + strings.ReplaceAll(deepBlock(200), "\n", "\n  ")
	deep = strings.TrimRight(deep, " ")
	if _, errOut, code := run(t, deep, "-"); code != 0 && strings.Contains(errOut, "nested too deeply") {
		t.Errorf("200 levels refused: exit %d, %s", code, errOut)
	}
	if v, err := decodeDocument([]byte(strings.Repeat("[", 300)+strings.Repeat("]", 300)), 1<<20); err != nil || v == nil {
		t.Errorf("300 levels of flow sequences: %v, %v", v, err)
	}
}

// BenchmarkHostileYAML measures what refusing each hostile document costs.
func BenchmarkHostileYAML(b *testing.B) {
	cat, err := rules.Load()
	if err != nil {
		b.Fatal(err)
	}
	for _, bc := range []struct{ name, doc string }{
		{"laughs-9x9", laughs(9, 9)},
		{"podspec-23x2", podSpecBomb(23)},
		{"brackets-200KB", strings.Repeat("[", 200<<10)},
	} {
		b.Run(bc.name, func(b *testing.B) {
			c := &Checker{Engine: rules.NewEngine(cat)}
			b.ReportAllocs()
			b.SetBytes(int64(len(bc.doc)))
			for b.Loop() {
				if _, err := c.Check("bomb.yaml", []byte(bc.doc), func(string, *auditlensv1.Finding) {}); err == nil {
					b.Fatal("accepted")
				}
			}
		})
	}
}

// A FIFO (or a socket, or a device) named *.yaml in a directory is skipped with an error
// naming it; the manifests beside it are checked, and the command ends.
func TestDirectoryWithAFIFO(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "a.yaml"), []byte("apiVersion: extensions/v1beta1\nkind: Ingress\nmetadata: {name: web}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(dir, "b.yaml"), 0o644); err != nil {
		t.Fatal(err)
	}
	done := make(chan int, 1)
	var out, errb strings.Builder
	go func() { done <- Main([]string{"--format", "table", dir}, strings.NewReader(""), &out, &errb) }()
	select {
	case code := <-done:
		if !strings.Contains(errb.String(), "b.yaml: not a regular file") {
			t.Errorf("stderr does not name the FIFO: %s", errb.String())
		}
		if !strings.Contains(out.String(), "extensions/v1beta1") {
			t.Errorf("the Ingress beside the FIFO was not checked (exit %d): %s", code, out.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("classify manifests still blocks on the FIFO after 30 s")
	}
}
