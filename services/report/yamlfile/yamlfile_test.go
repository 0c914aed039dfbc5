package yamlfile_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/auditlens/auditlens/services/report/yamlfile"
)

type doc struct {
	Name string `yaml:"name"`
}

func parse(name string, data []byte) (doc, error) {
	var d doc
	y, err := yamlfile.Decode(name, data, &d)
	if err != nil {
		return doc{}, err
	}
	if d.Name == "bad" {
		return doc{}, y.At("$.name", "name %q is refused", d.Name)
	}
	return d, nil
}

// TestFileKeepsTheLastGoodVersion: a changed file is put in force when it parses; one that
// does not is refused with its position, counted once, and the last good version stays.
func TestFileKeepsTheLastGoodVersion(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f.yaml")
	write := func(s string) {
		if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("name: one\n")
	refused := 0
	f := &yamlfile.File[doc]{Path: path, Parse: parse, OnError: func(error) { refused++ }}
	if err := f.Load(); err != nil {
		t.Fatal(err)
	}
	if f.Current().Name != "one" {
		t.Fatalf("%+v", f.Current())
	}
	if changed, err := f.Reload(); changed || err != nil {
		t.Errorf("unchanged file: changed %t, %v", changed, err)
	}
	write("name: one\nextra: 1\n")
	for range 2 {
		_, err := f.Reload()
		var pe *yamlfile.PosError
		if !errors.As(err, &pe) || pe.Line != 2 || !strings.HasPrefix(err.Error(), path+":2:") {
			t.Errorf("unknown key: %v, want an error at %s:2", err, path)
		}
	}
	write("name: bad\n")
	if _, err := f.Reload(); err == nil || !strings.Contains(err.Error(), ":1:7: name \"bad\" is refused") {
		t.Errorf("refused value: %v", err)
	}
	if f.Current().Name != "one" || f.Err() == nil || refused != 2 {
		t.Errorf("after refused versions: %+v, err %v, refused %d; want one in force, the error kept, 2 refusals", f.Current(), f.Err(), refused)
	}
	write("name: two\n")
	if changed, err := f.Reload(); !changed || err != nil || f.Current().Name != "two" || f.Err() != nil {
		t.Errorf("good version: changed %t, %v, %+v", changed, err, f.Current())
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Reload(); err == nil || f.Current().Name != "two" {
		t.Errorf("removed file: %v, %+v", err, f.Current())
	}
}

// The owners and acknowledgements files are bounded as manifests are (review 3 E2): a file of
// brackets or a flat list of millions of items is refused, naming the file, before the parser
// holds it.
func TestDecodeRefusesWhatWouldCostGigabytes(t *testing.T) {
	for name, c := range map[string]struct {
		data string
		want string
	}{
		"200 KB of [":       {strings.Repeat("[", 200<<10), "acks.yaml: nested too deeply"},
		"a 3 MiB flat list": {"teams:\n" + strings.Repeat("- a\n", 3<<18), "acks.yaml: too large: more than 1048576 tokens"},
		"16 MiB":            {"teams:\n" + strings.Repeat("- a\n", 4<<20), "acks.yaml: too large: 16777223 bytes"},
	} {
		var v any
		if _, err := yamlfile.Decode("acks.yaml", []byte(c.data), &v); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", name, err, c.want)
		}
	}
}
