package weekly

import (
	"fmt"
	"strconv"
	"strings"
)

// Version is a Kubernetes minor release, compared numerically: 1.9 < 1.16.
type Version struct {
	Major, Minor uint32
}

// ParseVersion parses "1.22" (a leading "v" and a patch level, "v1.22.3", are accepted and the
// patch ignored).
func ParseVersion(s string) (Version, error) {
	t := strings.TrimPrefix(strings.TrimSpace(s), "v")
	parts := strings.Split(t, ".")
	if len(parts) < 2 || len(parts) > 3 {
		return Version{}, fmt.Errorf("version %q: want MAJOR.MINOR, e.g. 1.29", s)
	}
	var n [2]uint32
	for i := range n {
		v, err := strconv.ParseUint(parts[i], 10, 16)
		if err != nil {
			return Version{}, fmt.Errorf("version %q: want MAJOR.MINOR, e.g. 1.29", s)
		}
		n[i] = uint32(v)
	}
	if len(parts) == 3 {
		if _, err := strconv.ParseUint(parts[2], 10, 16); err != nil {
			return Version{}, fmt.Errorf("version %q: want MAJOR.MINOR, e.g. 1.29", s)
		}
	}
	if n[0] == 0 {
		return Version{}, fmt.Errorf("version %q: major version must be at least 1", s)
	}
	if n[0] > 99 || n[1] > 999 {
		// Ordinal (what the SQL compares) needs the minor below 1000.
		return Version{}, fmt.Errorf("version %q: want a major version below 100 and a minor below 1000", s)
	}
	return Version{n[0], n[1]}, nil
}

func (v Version) String() string { return fmt.Sprintf("%d.%d", v.Major, v.Minor) }

// IsZero reports whether v is unset.
func (v Version) IsZero() bool { return v.Major == 0 }

// Less reports whether v is before w.
func (v Version) Less(w Version) bool {
	if v.Major != w.Major {
		return v.Major < w.Major
	}
	return v.Minor < w.Minor
}

// Ordinal is Major*1000+Minor: what the SQL compares (minor releases stay below 1000).
func (v Version) Ordinal() uint32 { return v.Major*1000 + v.Minor }

// Set implements flag.Value.
func (v *Version) Set(s string) error {
	p, err := ParseVersion(s)
	if err != nil {
		return err
	}
	*v = p
	return nil
}

// MarshalText implements encoding.TextMarshaler.
func (v Version) MarshalText() ([]byte, error) { return []byte(v.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler.
func (v *Version) UnmarshalText(b []byte) error { return v.Set(string(b)) }
