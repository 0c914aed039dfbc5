package main

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/auditlens/auditlens/deploy/release/deps"
)

// noticeHeader opens the NOTICE file.
const noticeHeader = `auditlens
Copyright 2026 The auditlens Authors

Licensed under the Apache License, Version 2.0 (the LICENSE file).

The auditlens binaries (ingest, classify, report, auditlens) and images are built from the
third-party Go modules below, under the licences named. This file is generated from the
binaries' module graph on the shipped platforms (make notice); do not edit it by hand.
The all-in-one image and the linux/amd64 release archive also carry libchdb (embedded
ClickHouse): its notices are shipped beside it, in libchdb-NOTICE.txt.
`

// Notice renders the NOTICE file: the list of modules with their licences, the NOTICE files of
// the modules that have one, then the licence texts (one copy of each distinct text, naming
// the modules it covers).
func Notice(mods []deps.Module) string {
	var b strings.Builder
	b.WriteString(noticeHeader)
	b.WriteString("\n== Third-party Go modules\n\n")
	for _, m := range mods {
		if m.Own {
			continue
		}
		fmt.Fprintf(&b, "%s %s: %s\n", m.Path, m.Version, strings.Join(m.Licenses, " AND "))
	}
	b.WriteString("\n== Their NOTICE files\n")
	for _, m := range mods {
		if !m.Own && m.NoticeText != "" {
			fmt.Fprintf(&b, "\n--- %s %s\n\n%s\n", m.Path, m.Version, m.NoticeText)
		}
	}
	b.WriteString("\n== Licence texts\n")
	byText := map[string][]string{}
	for _, m := range mods {
		if !m.Own {
			byText[m.LicenseText] = append(byText[m.LicenseText], m.Path)
		}
	}
	texts := make([]string, 0, len(byText))
	for t := range byText {
		texts = append(texts, t)
	}
	sort.Slice(texts, func(i, j int) bool { return byText[texts[i]][0] < byText[texts[j]][0] })
	for _, t := range texts {
		fmt.Fprintf(&b, "\n--- %s\n\n%s\n", strings.Join(byText[t], ", "), t)
	}
	return b.String()
}

// readOverrides reads licenses/overrides.txt: lines "module SPDX-id file", the file (under
// licenses/) holding the licence text its repository has at its root, or "module:PATH", a
// file of the module itself.
func readOverrides(dir string) (map[string]deps.Override, error) {
	b, err := os.ReadFile(filepath.Join(dir, "overrides.txt"))
	if err != nil {
		return nil, fmt.Errorf("read licence overrides: %w", err)
	}
	out := map[string]deps.Override{}
	for i, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		if len(f) != 3 {
			return nil, fmt.Errorf("overrides.txt:%d: want \"module SPDX-id file\"", i+1)
		}
		if p, ok := strings.CutPrefix(f[2], "module:"); ok {
			out[f[0]] = deps.Override{License: f[1], ModuleFile: p}
			continue
		}
		text, err := os.ReadFile(filepath.Join(dir, f[2]))
		if err != nil {
			return nil, fmt.Errorf("overrides.txt:%d: %w", i+1, err)
		}
		out[f[0]] = deps.Override{License: f[1], Text: strings.TrimSpace(string(text))}
	}
	return out, nil
}
