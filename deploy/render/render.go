// Package render builds the kustomizations under deploy/kubernetes with the kustomize API, as
// `kubectl apply -k` does, into the objects a cluster receives.
package render

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"
)

// Kustomizations lists, relative to the deploy/kubernetes directory root, every directory
// holding a kustomization.yaml of kind Kustomization (base and each overlay); the components,
// which build only inside an overlay, are left out (Components lists them).
func Kustomizations(root string) ([]string, error) { return list(root, "Kustomization") }

// Components lists, relative to root, every directory holding a kustomize Component.
func Components(root string) ([]string, error) { return list(root, "Component") }

func list(root, kind string) ([]string, error) {
	var dirs []string
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() || d.Name() != "kustomization.yaml" {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		var k struct {
			Kind string `json:"kind"`
		}
		if err := yaml.Unmarshal(b, &k); err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		if k.Kind == "" {
			k.Kind = "Kustomization"
		}
		if k.Kind != kind {
			return nil
		}
		rel, err := filepath.Rel(root, filepath.Dir(path))
		if err != nil {
			return err
		}
		dirs = append(dirs, rel)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list kustomizations under %s: %w", root, err)
	}
	sort.Strings(dirs)
	return dirs, nil
}

// Build renders the kustomization in dir as it is on disk.
func Build(dir string) ([]*unstructured.Unstructured, error) {
	return run(filesys.MakeFsOnDisk(), dir)
}

// requiredCluster is the line an overlay leaves commented for the installer to fill in:
// "# - cluster=" in its auditlens-settings literals (components/settings).
var requiredCluster = regexp.MustCompile(`(?m)^(\s*)# - cluster=.*$`)

// BuildWithCluster renders the overlay dir (relative to root, the deploy/kubernetes directory)
// as an installer would after giving the cluster's name: the overlay's commented
// "# - cluster=" literal becomes "- cluster=<cluster>". The tree is copied into memory, the
// files on disk are left as they are. An overlay that names its cluster already is rendered
// as it is.
func BuildWithCluster(root, dir, cluster string) ([]*unstructured.Unstructured, error) {
	mem := filesys.MakeFsInMemory()
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if rel == filepath.Join(dir, "kustomization.yaml") {
			b = requiredCluster.ReplaceAll(b, []byte("${1}- cluster="+cluster))
			if !bytes.Contains(b, []byte("- cluster=")) {
				return fmt.Errorf("%s: no cluster literal", path)
			}
		}
		return mem.WriteFile(filepath.Join("/k", rel), b)
	})
	if err != nil {
		return nil, fmt.Errorf("copy %s: %w", root, err)
	}
	return run(mem, filepath.Join("/k", dir))
}

func run(fsys filesys.FileSystem, dir string) ([]*unstructured.Unstructured, error) {
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	m, err := k.Run(fsys, dir)
	if err != nil {
		return nil, fmt.Errorf("build %s: %w", dir, err)
	}
	var out []*unstructured.Unstructured
	for _, r := range m.Resources() {
		obj, err := r.Map()
		if err != nil {
			return nil, fmt.Errorf("build %s: %s: %w", dir, r.CurId(), err)
		}
		out = append(out, &unstructured.Unstructured{Object: obj})
	}
	return out, nil
}
