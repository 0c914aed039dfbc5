// Package kubeversion is a Kubernetes minor release ("1.25"): parsed once, compared
// numerically (1.9 < 1.16), used alike by the catalogue, the scan, the store and the weekly
// report.
package kubeversion

import (
	"fmt"
	"strconv"
	"strings"
)

// Version is a Kubernetes minor release. The zero value means "unset".
type Version struct {
	Major, Minor int
}

// Limits of a Version, so that Key stays a small sortable number (what SQL compares).
const (
	MaxMajor = 99
	MaxMinor = 999
)

// Parse parses "1.25". A leading "v", a patch level and a pre-release suffix are accepted
// and ignored: "v1.25.3", "1.25.0-alpha.1", "v1.38.0-beta.0+build".
func Parse(s string) (Version, error) {
	t := strings.TrimPrefix(strings.TrimSpace(s), "v")
	if i := strings.IndexAny(t, "-+"); i >= 0 {
		t = t[:i]
	}
	parts := strings.Split(t, ".")
	if len(parts) < 2 || len(parts) > 3 {
		return Version{}, fmt.Errorf("version %q: want MAJOR.MINOR, e.g. 1.29", s)
	}
	var n [3]int
	for i, p := range parts {
		v, err := strconv.ParseUint(p, 10, 16)
		if err != nil {
			return Version{}, fmt.Errorf("version %q: want MAJOR.MINOR, e.g. 1.29", s)
		}
		n[i] = int(v)
	}
	if n[0] == 0 {
		return Version{}, fmt.Errorf("version %q: major version must be at least 1", s)
	}
	if n[0] > MaxMajor || n[1] > MaxMinor {
		return Version{}, fmt.Errorf("version %q: want a major version below %d and a minor below %d", s, MaxMajor+1, MaxMinor+1)
	}
	return Version{Major: n[0], Minor: n[1]}, nil
}

// MustParse is Parse for constants; it panics on a bad version.
func MustParse(s string) Version {
	v, err := Parse(s)
	if err != nil {
		panic(err)
	}
	return v
}

// String is "1.25", or "" when v is unset.
func (v Version) String() string {
	if v.IsZero() {
		return ""
	}
	return strconv.Itoa(v.Major) + "." + strconv.Itoa(v.Minor)
}

// IsZero reports whether v is unset.
func (v Version) IsZero() bool { return v.Major == 0 }

// Compare returns -1, 0 or +1 as a is before, the same as, or after b.
func Compare(a, b Version) int {
	switch {
	case a.Major != b.Major:
		return cmpInt(a.Major, b.Major)
	default:
		return cmpInt(a.Minor, b.Minor)
	}
}

func cmpInt(a, b int) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// Less reports whether v is before w.
func (v Version) Less(w Version) bool { return Compare(v, w) < 0 }

// Key is Major*1000+Minor: a number that sorts as the versions do (what SQL compares).
func (v Version) Key() int { return v.Major*(MaxMinor+1) + v.Minor }

// Next is the minor release after v.
func (v Version) Next() Version { return Version{Major: v.Major, Minor: v.Minor + 1} }

// Set implements flag.Value.
func (v *Version) Set(s string) error {
	p, err := Parse(s)
	if err != nil {
		return err
	}
	*v = p
	return nil
}

// MarshalText implements encoding.TextMarshaler.
func (v Version) MarshalText() ([]byte, error) { return []byte(v.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler; empty text is the unset version.
func (v *Version) UnmarshalText(b []byte) error {
	if len(b) == 0 {
		*v = Version{}
		return nil
	}
	return v.Set(string(b))
}

// Agent reads the program name and release of a Kubernetes user agent, as client-go writes
// it for kubectl, the components and programs built on it:
// "<name>/v<major>.<minor>.<patch>[-pre][+meta] (<os>/<arch>) kubernetes/<commit>". ok is
// false when ua carries no such release, or v0.x (a program built without version stamping).
func Agent(ua string) (name string, v Version, ok bool) {
	slash := strings.IndexByte(ua, '/')
	if slash <= 0 || slash+1 >= len(ua) || ua[slash+1] != 'v' {
		return "", Version{}, false
	}
	rest := ua[slash+2:]
	major, n := digits(rest)
	if n == 0 || n >= len(rest) || rest[n] != '.' {
		return "", Version{}, false
	}
	minor, m := digits(rest[n+1:])
	if m == 0 || major < 1 || major > MaxMajor || minor > MaxMinor {
		return "", Version{}, false
	}
	return ua[:slash], Version{Major: major, Minor: minor}, true
}

// digits reads the decimal number at the start of s (at most 4 digits) and its length.
func digits(s string) (int, int) {
	v, i := 0, 0
	for i < len(s) && i < 4 && s[i] >= '0' && s[i] <= '9' {
		v = v*10 + int(s[i]-'0')
		i++
	}
	return v, i
}
