package main

import (
	"bytes"
	"strings"
	"testing"
)

func TestManifestsAndCatalogueAreDispatched(t *testing.T) {
	var out, errOut bytes.Buffer
	m := "apiVersion: batch/v1beta1\nkind: CronJob\nmetadata: {name: backup}\n"
	if code := run([]string{"manifests", "--target-version", "1.25", "-"}, strings.NewReader(m), &out, &errOut); code != 3 {
		t.Fatalf("manifests: exit %d, stderr %s", code, errOut.String())
	}
	if !strings.Contains(out.String(), `"source":"stdin#1"`) {
		t.Errorf("manifests stdout %s", out.String())
	}
	out.Reset()
	if code := run([]string{"catalogue", "--from", "1.32", "--to", "1.37", "--format", "markdown"}, nil, &out, &errOut); code != 0 {
		t.Fatalf("catalogue: exit %d, stderr %s", code, errOut.String())
	}
	if !strings.Contains(out.String(), "`storage.k8s.io/v1beta1 volumeattributesclasses`") {
		t.Errorf("catalogue stdout %s", out.String())
	}
}
