package buildinfo

import (
	"runtime"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestStamped(t *testing.T) {
	defer func(v, c, d string) { version, commit, date = v, c, d }(version, commit, date)
	version, commit, date = "1.2.3", "0123456789abcdef0123456789abcdef01234567", "2026-11-30T12:00:00Z"
	i := Get()
	want := "classify 1.2.3\ncommit: 0123456789abcdef0123456789abcdef01234567\nbuilt: 2026-11-30T12:00:00Z\ngo: " +
		runtime.Version() + " " + runtime.GOOS + "/" + runtime.GOARCH + "\n"
	if got := i.String("classify"); got != want {
		t.Fatalf("--version printed\n%s\nwant\n%s", got, want)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(i.Collector())
	exp := `# HELP auditlens_build_info The build of this process (always 1): its version, commit and Go version.
# TYPE auditlens_build_info gauge
auditlens_build_info{commit="0123456789abcdef0123456789abcdef01234567",goversion="` + runtime.Version() + `",version="1.2.3"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(exp), "auditlens_build_info"); err != nil {
		t.Fatal(err)
	}
}

// A test binary carries no stamps: the version says so rather than inventing one.
func TestUnstamped(t *testing.T) {
	i := Get()
	if i.Version != "devel" || i.Commit == "" || i.Date == "" || i.GoVersion != runtime.Version() {
		t.Fatalf("unstamped build: %+v", i)
	}
}

func TestIsVersionFlag(t *testing.T) {
	for _, c := range []struct {
		args []string
		want bool
	}{
		{[]string{"--version"}, true}, {[]string{"-version"}, true},
		{nil, false}, {[]string{"--version", "x"}, false}, {[]string{"scan", "--version"}, false}, {[]string{"--versions"}, false},
	} {
		if got := IsVersionFlag(c.args); got != c.want {
			t.Errorf("%q: %v", c.args, got)
		}
	}
}
