package kubeversion

import (
	"encoding/json"
	"flag"
	"slices"
	"testing"
)

func TestParse(t *testing.T) {
	for in, want := range map[string]Version{
		"1.25": {1, 25}, "v1.25": {1, 25}, "1.25.3": {1, 25}, " v1.9.0 ": {1, 9},
		"1.25.0-alpha.1": {1, 25}, "v1.38.0-beta.0+abc": {1, 38}, "2.0": {2, 0},
	} {
		got, err := Parse(in)
		if err != nil || got != want {
			t.Errorf("Parse(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "1", "1.", "x.25", "1.25.3.4", "0.25", "1.-1", "1.1000", "100.1", "1.25.x", "v"} {
		if v, err := Parse(in); err == nil {
			t.Errorf("Parse(%q) = %v, want an error", in, v)
		}
	}
}

func TestOrder(t *testing.T) {
	vs := []Version{MustParse("1.16"), MustParse("1.9"), MustParse("2.0"), MustParse("1.22"), MustParse("1.9")}
	slices.SortFunc(vs, Compare)
	var got []string
	for _, v := range vs {
		got = append(got, v.String())
	}
	if want := []string{"1.9", "1.9", "1.16", "1.22", "2.0"}; !slices.Equal(got, want) {
		t.Fatalf("sorted %v, want %v", got, want)
	}
	for i := 1; i < len(vs); i++ {
		if (vs[i-1].Key() < vs[i].Key()) != vs[i-1].Less(vs[i]) {
			t.Errorf("Key and Less disagree on %v, %v", vs[i-1], vs[i])
		}
	}
	if MustParse("1.9").Next() != MustParse("1.10") {
		t.Error("1.9.Next() is not 1.10")
	}
}

func TestFlagAndText(t *testing.T) {
	var v Version
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.Var(&v, "target", "")
	if err := fs.Parse([]string{"--target", "v1.29.1"}); err != nil || v != (Version{1, 29}) {
		t.Fatalf("flag: %v %v", v, err)
	}
	if err := fs.Parse([]string{"--target", "1.x"}); err == nil {
		t.Fatal("bad flag value accepted")
	}
	b, _ := json.Marshal(struct{ V Version }{v})
	if string(b) != `{"V":"1.29"}` {
		t.Fatalf("json %s", b)
	}
	var back struct{ V Version }
	if err := json.Unmarshal([]byte(`{"V":""}`), &back); err != nil || !back.V.IsZero() || back.V.String() != "" {
		t.Fatalf("empty text: %v %v", back.V, err)
	}
}

// Agent reads the name and release of the user agents client-go writes, and nothing from
// other agents or unstamped builds.
func TestAgent(t *testing.T) {
	for ua, want := range map[string]string{
		"kubectl/v1.29.3 (linux/amd64) kubernetes/6813625":                     "kubectl 1.29",
		"kubelet/v1.33.2 (linux/amd64) kubernetes/abc":                         "kubelet 1.33",
		"kube-controller-manager/v1.35.0-rc.1+k3s1 (linux/arm64) kubernetes/x": "kube-controller-manager 1.35",
		"helm/v3.14.0 (linux/amd64) kubernetes/abc":                            "helm 3.14",
		"my-operator/v1.1024.0 (linux/amd64) kubernetes/$Format":               "",
		"my-operator/v0.0.0 (linux/amd64) kubernetes/$Format":                  "",
		"Mozilla/5.0 (X11; Linux x86_64)":                                      "",
		"kubelet/v1":                                                           "",
		"kubelet/v1.":                                                          "",
		"/v1.2":                                                                "",
		"":                                                                     "",
	} {
		name, v, ok := Agent(ua)
		got := ""
		if ok {
			got = name + " " + v.String()
		}
		if got != want {
			t.Errorf("Agent(%q) = %q, want %q", ua, got, want)
		}
	}
}
