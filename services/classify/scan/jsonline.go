package scan

import (
	"strconv"
	"time"
	"unicode/utf8"

	auditlensv1 "github.com/auditlens/auditlens/proto/auditlens/v1"
)

// appendJSON appends to dst the JSON line of f: the bytes encoding/json writes for ToJSON(f)
// (HTML not escaped) with DEL and the C1 controls escaped too (lib/printable.JSON), written
// without reflection: a scan spends a tenth of its time on findings, and encoding/json was
// most of that. TestAppendJSONIsEncodingJSON checks the bytes are the same.
func appendJSON(dst []byte, f *auditlensv1.Finding) []byte {
	str := func(name, v string) {
		dst = append(dst, ',', '"')
		dst = append(dst, name...)
		dst = append(dst, '"', ':')
		dst = appendString(dst, v)
	}
	dst = append(dst, `{"rule_id":`...)
	dst = appendString(dst, f.RuleId)
	str("severity", SeverityName(f.Severity))
	str("cluster", f.Cluster)
	str("audit_id", f.AuditId)
	dst = append(dst, `,"event_time":"`...)
	if f.EventTime != nil {
		dst = f.EventTime.AsTime().UTC().AppendFormat(dst, time.RFC3339Nano) // nothing to escape
	}
	dst = append(dst, '"')
	str("verb", f.Verb)
	str("request_uri", f.RequestUri)
	str("api_group", f.ApiGroup)
	str("api_version", f.ApiVersion)
	str("resource", f.Resource)
	str("subresource", f.Subresource)
	str("namespace", f.Namespace)
	str("name", f.Name)
	str("username", f.Username)
	str("user_agent", f.UserAgent)
	str("source_ip", f.SourceIp)
	dst = append(dst, `,"response_code":`...)
	dst = strconv.AppendInt(dst, int64(f.ResponseCode), 10)
	str("deprecated_in", f.DeprecatedIn)
	str("removed_in", f.RemovedIn)
	str("replacement", f.Replacement)
	str("message", f.Message)
	dst = append(dst, `,"evidence":[`...)
	for i, e := range f.Evidence {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, `{"path":`...)
		dst = appendString(dst, e.Path)
		dst = append(dst, `,"value":`...)
		dst = appendString(dst, e.Value)
		dst = append(dst, '}')
	}
	dst = append(dst, ']')
	str("stage", f.Stage)
	if f.Node != "" {
		str("node", f.Node)
	}
	str("confidence", confidenceName(f.Confidence))
	if f.RequestReceived != 0 {
		dst = append(dst, `,"request_received":"`...)
		dst = time.Unix(f.RequestReceived, 0).UTC().AppendFormat(dst, time.RFC3339) // nothing to escape
		dst = append(dst, '"')
	}
	return append(dst, '}', '\n')
}

const hexDigits = "0123456789abcdef"

// appendString appends s as a JSON string, escaped as encoding/json escapes it without HTML
// escaping (controls below U+0020, invalid UTF-8 as U+FFFD, U+2028 and U+2029) and, as
// lib/printable.JSON does, DEL and the C1 controls U+0080 to U+009F as \u escapes.
func appendString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		i = plainRun(s, i)
		if i >= len(s) {
			break
		}
		b := s[i]
		if b < utf8.RuneSelf {
			if b >= 0x20 && b != '"' && b != '\\' && b != 0x7f {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch b {
			case '"', '\\':
				dst = append(dst, '\\', b)
			case '\b':
				dst = append(dst, '\\', 'b')
			case '\f':
				dst = append(dst, '\\', 'f')
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hexDigits[b>>4], hexDigits[b&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
		case r == '\u2028' || r == '\u2029' || (r >= 0x80 && r <= 0x9f):
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', hexDigits[r>>12], hexDigits[r>>8&0xf], hexDigits[r>>4&0xf], hexDigits[r&0xf])
		default:
			i += size
			continue
		}
		i += size
		start = i
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

// plainRun returns the index after the whole eight-byte words of s from i that need no
// escaping (printable ASCII but '"' and '\\'), checked eight bytes at a time.
func plainRun(s string, i int) int {
	const lo, hi = 0x0101010101010101, 0x8080808080808080
	for ; i+8 <= len(s); i += 8 {
		x := uint64(s[i]) | uint64(s[i+1])<<8 | uint64(s[i+2])<<16 | uint64(s[i+3])<<24 |
			uint64(s[i+4])<<32 | uint64(s[i+5])<<40 | uint64(s[i+6])<<48 | uint64(s[i+7])<<56
		q, e, del := x^(lo*'"'), x^(lo*'\\'), x^(lo*0x7f)
		// A byte below 0x20, equal to '"', '\\' or DEL, or not ASCII, stops the run.
		if ((x-lo*0x20)|(q-lo)|(e-lo)|(del-lo)|x)&hi != 0 {
			return i
		}
	}
	return i
}
