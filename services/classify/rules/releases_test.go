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

func TestTargets(t *testing.T) {
	c, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	newest, err := kubeversion.Parse(c.NewestRelease)
	if err != nil {
		t.Fatalf("newest_release %q: %v", c.NewestRelease, err)
	}
	all, targets := c.Releases(), c.Targets()
	// The data schedules removals past the release after the newest it was read from (betas
	// deprecated in the newest are removed three releases later): those are not targets.
	if last := all[len(all)-1]; !newest.Next().Less(last) {
		t.Fatalf("releases end at %s, newest %s: the test needs a scheduled later removal", last, newest)
	}
	if got := targets[len(targets)-1]; got != newest.Next() {
		t.Errorf("targets end at %s, want %s (the release after newest_release %s)", got, newest.Next(), newest)
	}
	if !slices.Equal(targets, all[:len(targets)]) {
		t.Errorf("targets %v are not the start of releases %v", targets, all)
	}
	// A later document raises the newest release; without one every release is a target.
	o, err := LoadSources(append(embeddedSources(), Source{Name: "o", Data: []byte("schema_version: 1\nnewest_release: \"1.40\"\n")})...)
	if err != nil {
		t.Fatal(err)
	}
	if got := o.Targets(); got[len(got)-1] != kubeversion.MustParse("1.41") {
		t.Errorf("with newest_release 1.40: targets end at %s, want 1.41", got[len(got)-1])
	}
	c.NewestRelease = ""
	if got := c.Targets(); !slices.Equal(got, all) {
		t.Errorf("without newest_release: targets %v, want every release", got)
	}
}
