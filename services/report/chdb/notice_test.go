package chdb

import (
	"bytes"
	"flag"
	"os"
	"strings"
	"testing"

	"github.com/auditlens/auditlens/lib/enginetest"
)

var updateNotice = flag.Bool("update-notice", false, "rewrite deploy/licenses/libchdb.txt from libchdb's system.licenses")

// noticePath is the notice shipped beside libchdb.so (release archive, all-in-one image).
const noticePath = "../../../deploy/licenses/libchdb.txt"

const noticeHeader = `libchdb.so (embedded ClickHouse), shipped in the linux/amd64 release archive and the
all-in-one image, comes unmodified from the npm package @chdb/lib-linux-x64-gnu, licensed under
the Apache License, Version 2.0 (the LICENSE file beside this one holds its text).

chDB is built from ClickHouse (Copyright ClickHouse, Inc.), licensed under the Apache
License, Version 2.0. ClickHouse and chDB include the third-party libraries below (library,
licence, path in ClickHouse's source tree), as the library itself lists them in its table
system.licenses; the full text of each licence is in the same table:

    SELECT library_name, license_text FROM system.licenses

This file is generated from that table (go test ./chdb -run TestNotice -update-notice in
services/report); do not edit it by hand.
`

// TestNotice: the notice lists every third-party library the loaded libchdb.so says it
// contains, so a newer library with new parts makes this test fail until it is regenerated.
func TestNotice(t *testing.T) {
	if err := Available(); err != nil {
		enginetest.Unavailable(t, "chdb", err)
	}
	s, err := acquire(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer release(s)
	version, _, err := s.query("", "SELECT version()", "TSV")
	if err != nil {
		t.Fatal(err)
	}
	rows, n, err := s.query("", "SELECT DISTINCT library_name, license_type, license_path FROM system.licenses ORDER BY library_name, license_path", "TSV")
	if err != nil {
		t.Fatal(err)
	}
	if n < 100 {
		t.Fatalf("system.licenses lists %d libraries: expected hundreds", n)
	}
	var b bytes.Buffer
	b.WriteString(noticeHeader)
	b.WriteString("\nClickHouse version of this libchdb.so: " + strings.TrimSpace(string(version)) + "\n\n")
	b.Write(rows)
	if *updateNotice {
		if err := os.WriteFile(noticePath, b.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	have, err := os.ReadFile(noticePath)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(have, b.Bytes()) {
		t.Fatalf("%s is stale for the libchdb.so loaded: run go test ./chdb -run TestNotice -update-notice in services/report", noticePath)
	}
}
