package manifests

import (
	"os"
	"path/filepath"
	"testing"

	auditlensv1 "github.com/auditlens/auditlens/proto/auditlens/v1"
	"github.com/auditlens/auditlens/services/classify/rules"
)

// FuzzCheck feeds arbitrary files through the document splitter, the bounded YAML decoder,
// Helm release storage, the manifest-to-event conversion and every rule: errors are fine,
// panics are not, and every finding names its source and has a message.
func FuzzCheck(f *testing.F) {
	files, _ := filepath.Glob("testdata/tree/*/*/*.y*ml")
	files = append(files, "testdata/tree/list.json")
	for _, file := range files {
		b, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte("--- {apiVersion: v1, kind: Pod}\n...\n---\n# c\n"))
	f.Add([]byte("apiVersion: v1\nkind: List\nitems: [1, {kind: X}]\n"))
	f.Add([]byte("apiVersion: v1\nkind: Service\nmetadata: {annotations: {kubectl.kubernetes.io/last-applied-configuration: '{\"spec\":{\"topologyKeys\":[1]}}'}}\n"))
	f.Add([]byte(laughs(3, 3)))
	f.Add([]byte(podSpecBomb(4)))
	f.Add([]byte("a: [[[{b: [1]}]]]\nc: |\n  [[[[\n"))
	f.Add([]byte(toJSON(f, storage(f, "Secret", "web", "shop", 1, "deployed", releaseManifest))))
	cat, err := rules.Load()
	if err != nil {
		f.Fatal(err)
	}
	c := &Checker{Engine: rules.NewEngine(cat), MaxDocumentSize: 1 << 20}
	f.Fuzz(func(t *testing.T, data []byte) {
		_, _ = c.Check("fuzz.yaml", data, func(source string, fd *auditlensv1.Finding) {
			if source == "" || fd.Message == "" || fd.RuleId == "" {
				t.Fatalf("finding without source, message or rule: %q %v", source, fd)
			}
		})
	})
}
