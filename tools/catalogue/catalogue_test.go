package main

import (
	"bytes"
	"os"
	"strings"
	"testing"

	"github.com/auditlens/auditlens/lib/kubeversion"
)

// TestBuild runs the generator over two fabricated module versions in testdata: the newest
// value wins, an alpha whose types left is not served from the next release, tags name
// resources, a replacement that is itself removed is followed to the served version, and
// non-resource kinds are not API rows.
func TestBuild(t *testing.T) {
	mods := []moduleSpec{{Path: "example.com/api", Dir: ".", Versions: []string{"v0.30.0", "v0.31.0"}}}
	dirs := map[string]string{}
	all := map[gvk]*seen{}
	for i, v := range mods[0].Versions {
		dirs[v] = "testdata/" + v
		kinds, err := readModule(os.DirFS("testdata/"+v), ".")
		if err != nil {
			t.Fatal(err)
		}
		last, _ := moduleRelease(v)
		var next kubeversion.Version
		if i == 0 {
			next = kubeversion.MustParse("1.31")
		}
		for _, k := range kinds {
			key := gvk{k.Group, k.Version, k.Kind}
			all[key] = &seen{info: k, from: "example.com/api@" + v, module: "example.com/api", last: last, next: next, inNewest: i == 1}
		}
	}
	c, err := build(all, kubeversion.MustParse("1.31"), &overlay{})
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := c.write(&buf, mods); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	for _, want := range []string{
		// newest value (1.27 from v0.31.0) wins; replacement v1beta2 is removed too: followed to v1
		`{group: widgets.example.com, version: v1beta1, resource: gadgetries, kind: Gadget, deprecated_in: "1.23", removed_in: "1.27", replacement: widgets.example.com/v1, source: "example.com/api@v0.31.0; replacement: tagged widgets.example.com/v1beta2 Gadget -> served widgets.example.com/v1 Gadget"}`,
		// tagged removal 1.34, but the types left in v0.31: not served from 1.31
		`{group: widgets.example.com, version: v1alpha1, resource: gizmos, kind: Gizmo, removed_in: "1.31", replacement: widgets.example.com/v1`,
		// the body of a subresource
		`body_kinds:`,
		`{group: widgets.example.com, version: v1, resource: gadgetries, kind: Gadget}`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks\n%s\ngot:\n%s", want, out)
		}
	}
	for _, not := range []string{"GizmoList", "resource: evictions"} {
		if strings.Contains(out, not) {
			t.Errorf("output has %s:\n%s", not, out)
		}
	}
}

func TestOverlayCannotOverrideTaggedData(t *testing.T) {
	c := &catalogueData{Newest: kubeversion.MustParse("1.31"), APIs: []Row{{Group: "g", Version: "v1beta1", Resource: "xs", Kind: "X", RemovedIn: kubeversion.MustParse("1.30"), tagged: true}}}
	o := &overlay{APIs: []overlayAPI{{Group: "g", Version: "v1beta1", Resource: "xs", Kind: "X", RemovedIn: kubeversion.MustParse("1.29"), Source: "s"}}}
	if err := o.apply(c); err == nil || !strings.Contains(err.Error(), "drop the overlay line") {
		t.Fatalf("apply: %v", err)
	}
}
