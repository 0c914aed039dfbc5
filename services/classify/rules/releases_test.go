package rules

import (
	"slices"
	"testing"

	"github.com/auditlens/auditlens/lib/kubeversion"
)

func TestReleases(t *testing.T) {
	c, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	got := c.Releases()
	// Apps v1beta1 (removed 1.16) comes first; ingresses (1.22), PodSecurityPolicy (1.25),
	// flowcontrol v1beta3 (1.32) are there, and so are releases without a removal between them.
	if len(got) == 0 || got[0] != kubeversion.MustParse("1.16") {
		t.Fatalf("releases %v: want 1.16 first", got)
	}
	for i := 1; i < len(got); i++ {
		if got[i] != got[i-1].Next() {
			t.Errorf("releases %v: %s follows %s", got, got[i], got[i-1])
		}
	}
	for _, want := range []string{"1.22", "1.25", "1.32"} {
		if !slices.Contains(got, kubeversion.MustParse(want)) {
			t.Errorf("releases %v lack %s", got, want)
		}
	}
	// Removals of an override file count.
	c.APIs = append(c.APIs, APISpec{Group: "example.com", Version: "v1", Resource: "things", RemovedIn: "1.99"})
	if got := c.Releases(); got[len(got)-1] != kubeversion.MustParse("1.99") {
		t.Errorf("last release %s, want 1.99", got[len(got)-1])
	}
}
