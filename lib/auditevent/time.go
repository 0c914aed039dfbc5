package auditevent

// Time stamps of audit events (metav1.MicroTime).

import (
	"fmt"
	"time"
)

// microTime reads a metav1.MicroTime: null is the zero time; a string in the apiserver's
// format (RFC 3339 with exactly six fractional digits) or, more leniently, any RFC 3339 time.
func (s *scanner) microTime(dst *time.Time, field string) error {
	switch c := s.peek(); c {
	case 'n':
		*dst = time.Time{}
		return s.literal("null")
	case '"':
		v, err := s.str()
		if err != nil {
			return err
		}
		t, err := parseTime(v)
		if err != nil {
			return fmt.Errorf("%w: %s %q is not an RFC 3339 time", ErrNotAuditEvent, field, v)
		}
		*dst = t
		return nil
	default:
		if _, err := s.skip(1); err != nil {
			return err
		}
		return typeError(field, c, "a string")
	}
}

// parseTime parses "2006-01-02T15:04:05.000000Z" (the apiserver's MicroTime) and
// "2006-01-02T15:04:05Z" (v1beta1's timestamp) quickly, other RFC 3339 forms with time.Parse.
func parseTime(v string) (time.Time, error) {
	if (len(v) == 27 && v[19] == '.' || len(v) == 20) && v[len(v)-1] == 'Z' &&
		v[4] == '-' && v[7] == '-' && v[10] == 'T' && v[13] == ':' && v[16] == ':' {
		y, ok1 := digits(v[0:4])
		mo, ok2 := digits(v[5:7])
		d, ok3 := digits(v[8:10])
		h, ok4 := digits(v[11:13])
		mi, ok5 := digits(v[14:16])
		sec, ok6 := digits(v[17:19])
		us, ok7 := 0, true
		if len(v) == 27 {
			us, ok7 = digits(v[20:26])
		}
		if ok1 && ok2 && ok3 && ok4 && ok5 && ok6 && ok7 && mo >= 1 && mo <= 12 && d >= 1 && d <= daysIn(mo, y) && h < 24 && mi < 60 && sec < 60 {
			return time.Unix(unixDays(y, mo, d)*86400+int64(h*3600+mi*60+sec), int64(us)*1000).UTC(), nil
		}
	}
	if t, err := time.Parse("2006-01-02T15:04:05.000000Z07:00", v); err == nil {
		return t, nil
	}
	return time.Parse(time.RFC3339Nano, v)
}

func digits(s string) (int, bool) {
	n := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int(c-'0')
	}
	return n, true
}

func daysIn(m, y int) int {
	switch m {
	case 2:
		if y%4 == 0 && (y%100 != 0 || y%400 == 0) {
			return 29
		}
		return 28
	case 4, 6, 9, 11:
		return 30
	}
	return 31
}

// unixDays is the number of days from 1970-01-01 to the valid date y-m-d of the proleptic
// Gregorian calendar (what time.Date computes, without its normalising: most of the cost of
// reading a time stamp). The civil-from-days algorithm of H. Hinnant, in eras of 400 years.
func unixDays(y, m, d int) int64 {
	if m <= 2 {
		y--
	}
	era := y / 400
	if y < 0 {
		era = (y - 399) / 400
	}
	yoe := y - era*400 // [0, 399]
	mp := m - 3        // March is 0
	if m <= 2 {
		mp = m + 9
	}
	doy := (153*mp+2)/5 + d - 1
	doe := yoe*365 + yoe/4 - yoe/100 + doy
	return int64(era)*146097 + int64(doe) - 719468
}
