// Package render builds the kustomizations under deploy/kubernetes with the kustomize API, as
// `kubectl apply -k` does, into the objects a cluster receives.
package render

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

// Kustomizations lists, relative to the deploy/kubernetes directory root, every directory
// holding a kustomization.yaml: base, monitoring and each overlay.
func Kustomizations(root string) ([]string, error) {
	var dirs []string
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && d.Name() == "kustomization.yaml" {
			rel, err := filepath.Rel(root, filepath.Dir(path))
			if err != nil {
				return err
			}
			dirs = append(dirs, rel)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list kustomizations under %s: %w", root, err)
	}
	sort.Strings(dirs)
	return dirs, nil
}

// Build renders the kustomization in dir.
func Build(dir string) ([]*unstructured.Unstructured, error) {
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	m, err := k.Run(filesys.MakeFsOnDisk(), dir)
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
