package main

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"strings"

	cdx "github.com/CycloneDX/cyclonedx-go"
)

// SBOM is the CycloneDX (JSON) bill of materials of the release: auditlens, every Go module its
// binaries link (its own included) and libchdb, with licences and hashes.
func SBOM(d Dist, libchdbSHA256 string) ([]byte, error) {
	bom := cdx.NewBOM()
	// The serial number and time are derived from the release, so that two builds agree.
	id := sha256.Sum256([]byte("auditlens " + d.Stamp.Version + " " + d.Stamp.Commit))
	id[6] = id[6]&0x0f | 0x50 // a name-based UUID (version 5 layout, RFC 9562 variant)
	id[8] = id[8]&0x3f | 0x80
	bom.SerialNumber = fmt.Sprintf("urn:uuid:%x-%x-%x-%x-%x", id[0:4], id[4:6], id[6:8], id[8:10], id[10:16])
	main := cdx.Component{
		BOMRef: "pkg:golang/github.com/auditlens/auditlens@" + d.Stamp.Version, Type: cdx.ComponentTypeApplication,
		Name: "auditlens", Version: d.Stamp.Version, PackageURL: "pkg:golang/github.com/auditlens/auditlens@" + d.Stamp.Version,
		Licenses:           &cdx.Licenses{{License: &cdx.License{ID: "Apache-2.0"}}},
		ExternalReferences: &[]cdx.ExternalReference{{Type: cdx.ERTypeVCS, URL: d.Source}},
		Properties:         &[]cdx.Property{{Name: "auditlens:commit", Value: d.Stamp.Commit}},
	}
	bom.Metadata = &cdx.Metadata{
		Timestamp: d.Stamp.Date.UTC().Format("2006-01-02T15:04:05Z"),
		Tools: &cdx.ToolsChoice{Components: &[]cdx.Component{{Type: cdx.ComponentTypeApplication, Name: "auditlens deploy/release",
			Version: d.Stamp.Version}}},
		Component: &main,
	}
	var comps []cdx.Component
	var refs []string
	for _, m := range d.Modules {
		version := m.Version
		if m.Own {
			version = d.Stamp.Version
		}
		purl := "pkg:golang/" + m.Path + "@" + version
		c := cdx.Component{BOMRef: purl, Type: cdx.ComponentTypeLibrary, Name: m.Path, Version: version, PackageURL: purl,
			Properties: &[]cdx.Property{{Name: "auditlens:binaries", Value: strings.Join(m.Binaries, ",")}}}
		var lic cdx.Licenses
		if m.Own {
			lic = cdx.Licenses{{License: &cdx.License{ID: "Apache-2.0"}}}
		}
		for _, l := range m.Licenses {
			lic = append(lic, cdx.LicenseChoice{License: &cdx.License{ID: l}})
		}
		if len(lic) > 0 {
			c.Licenses = &lic
		}
		if m.Sum != "" {
			*c.Properties = append(*c.Properties, cdx.Property{Name: "go:sum", Value: m.Sum})
		}
		comps = append(comps, c)
		refs = append(refs, purl)
	}
	// A purl's npm scope is percent-encoded: @chdb is %40chdb.
	libPurl := "pkg:npm/%40chdb/lib-linux-x64-gnu@" + d.LibchdbVersion
	comps = append(comps, cdx.Component{
		BOMRef: libPurl, Type: cdx.ComponentTypeLibrary, Group: "@chdb", Name: "libchdb.so", Version: d.LibchdbVersion,
		Description: "embedded ClickHouse (chDB), shipped in the linux/amd64 archive and the all-in-one image",
		PackageURL:  libPurl, Licenses: &cdx.Licenses{{License: &cdx.License{ID: "Apache-2.0"}}},
		Hashes: &[]cdx.Hash{{Algorithm: cdx.HashAlgoSHA256, Value: libchdbSHA256}},
	})
	refs = append(refs, libPurl)
	bom.Components = &comps
	bom.Dependencies = &[]cdx.Dependency{{Ref: main.BOMRef, Dependencies: &refs}}
	var buf bytes.Buffer
	enc := cdx.NewBOMEncoder(&buf, cdx.BOMFileFormatJSON)
	enc.SetPretty(true)
	if err := enc.Encode(bom); err != nil {
		return nil, fmt.Errorf("encode the SBOM: %w", err)
	}
	return buf.Bytes(), nil
}
