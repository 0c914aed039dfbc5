package auditevent

import (
	"fmt"
	"testing"
)

// decodeCases are inputs around the decoder's fast paths (a key or string read in one
// piece, escapes, time stamps, input cut short anywhere, invalid UTF-8, EventList items),
// with what the decoder passed (auditID/stage/verb/stageTimestamp of each event) and the error
// it returned, recorded with the decoder as it was before them (git e9a1b93): speed must not
// change an error's kind, message or offset, nor which events are passed.
var decodeCases = []struct{ in, events, err string }{
	{"{\"auditID\":\"a\",\"stage\":\"s\"", "[]", "not JSON: want ',' or '}' in object at offset 26"},
	{"{\"auditID\":\"a\",\"stage\":\"s", "[]", "not JSON: unterminated string at offset 24"},
	{"{\"auditID\":\"a\",\"stage", "[]", "not JSON: unterminated string at offset 16"},
	{"{\"auditID\":\"a\",\"stage\"", "[]", "not JSON: unexpected end, want ':' at offset 22"},
	{"{\"auditID\":\"a\",\"stage\" ", "[]", "not JSON: unexpected end, want ':' at offset 23"},
	{"{\"auditID\":\"a\",\"stage\":", "[]", "not JSON: unexpected end of input at offset 23"},
	{"{\"auditID\":\"a\",\"stage\"x\"s\"}", "[]", "not JSON: got 'x', want ':' at offset 22"},
	{"{\"auditID\":\"a\",\"stage\"\"s\"}", "[]", "not JSON: got '\"', want ':' at offset 22"},
	{"{\"auditID\":\"a\",\"st\\age\":\"s\"}", "[]", "not JSON: invalid escape \\a at offset 18"},
	{"{\"auditID\":\"a\",\"stage\":\"s\\\"}", "[]", "not JSON: unterminated string at offset 28"},
	{"{\"auditID\":\"a\",\"stage\":\"s\\", "[]", "not JSON: unterminated escape at offset 25"},
	{"{\"auditID\":\"a\",\"stage\":\"s\\u00\"}", "[]", "not JSON: invalid \\u escape at offset 25"},
	{"{\"auditID\":\"a\",\"stage\":\"s\\uZZZZ\"}", "[]", "not JSON: invalid \\u escape at offset 25"},
	{"{\"auditID\":\"a\",\"stage\":\"s\",\"verb\":\"0123456789012345678901234567890123456789012345678901234567890123456789\\q\"}", "[]", "not JSON: invalid escape \\q at offset 105"},
	{"{\"auditID\":\"a\",\"stage\":\"s\",\"verb\":\"0123456789012345678901234567890123456789012345678901234567890123456789", "[]", "not JSON: unterminated string at offset 35"},
	{"{\"auditID\":\"a\",\"stage\":\"s\",\"verb\":\"0123456789012345678901234567890123456789012345678901234567890123456789\\", "[]", "not JSON: unterminated escape at offset 105"},
	{"{\"auditID\":\"a\",\"stage\":\"s\",\"verb\":get}", "[]", "not JSON: invalid character 'g' at offset 34"},
	{"{\"auditID\":\"a\",\"stage\":\"s\",\"verb\":\"get\",}", "[]", "not JSON: want an object key at offset 40"},
	{"{\"auditID\":\"a\",\"stage\":\"s\",\"verb\":\"get\"", "[]", "not JSON: want ',' or '}' in object at offset 39"},
	{"{\"auditID\":\"a\",\"stage\":\"s\",verb:\"get\"}", "[]", "not JSON: want an object key at offset 27"},
	{"{\"auditID\":\"a\",\"stage\":\"s\",\"annotations\":{\"k\":\"v\",}}", "[]", "not JSON: want an object key at offset 50"},
	{"{\"auditID\":\"a\",\"stage\":\"s\",\"annotations\":{\"k\"\"v\"}}", "[]", "not JSON: got '\"', want ':' at offset 45"},
	{"{\"auditID\":\"a\",\"stage\":\"s\",\"annotations\":{\"k\":\"v\\", "[]", "not JSON: unterminated escape at offset 48"},
	{"{\"auditID\":\"a\",\"stage\":\"s\",\"user\":{\"username\":\"u\",\"groups\":[\"a\",]}}", "[]", "not JSON: invalid character ']' at offset 64"},
	{"{\"auditID\":\"a\",\"stage\":\"s\",\"responseStatus\":{\"details\":{\"name\":\"x\",\"kind\":\"y\\\"},\"code\":404}}", "[]", "not JSON: want ',' or '}' in object at offset 81"},
	{"{\"auditID\":\"a\",\"stage\":\"s\",\"responseStatus\":{\"message\":\"a \\\"b\\\" c\",\"code\":40x}}", "[]", "not JSON: want ',' or '}' in object at offset 76"},
	{"{\"auditID\":\"a\",\"stage\":\"s\",\"requestObject\":{\"a\":\"b\\\"c\",\"d\":[1,{\"e\":\"\\u00e9\"}]}", "[]", "not JSON: want ',' or '}' in object at offset 78"},
	{"{\"auditID\":\"a\",\"stage\":\"s\",\"requestReceivedTimestamp\":\"2026-13-01T00:00:00.000000Z\"}", "[]", "not an audit event: requestReceivedTimestamp \"2026-13-01T00:00:00.000000Z\" is not an RFC 3339 time"},
	{"{\"auditID\":\"a\",\"stage\":\"s\",\"requestReceivedTimestamp\":\"2026-02-29T00:00:00.000000Z\"}", "[]", "not an audit event: requestReceivedTimestamp \"2026-02-29T00:00:00.000000Z\" is not an RFC 3339 time"},
	{"{\"auditID\":\"a\",\"stage\":\"s\",\"stageTimestamp\":\"2026-02-28T24:00:00.000000Z\"}", "[]", "not an audit event: stageTimestamp \"2026-02-28T24:00:00.000000Z\" is not an RFC 3339 time"},
	{"{\"auditID\":\"a\",\"stage\":\"s\",\"stageTimestamp\":\"2026-02-28T23:00:00.000000\"}", "[]", "not an audit event: stageTimestamp \"2026-02-28T23:00:00.000000\" is not an RFC 3339 time"},
	{"{\"auditID\":\"a\",\"stage\":\"s\",\"stageTimestamp\":\"2026-02-28T23:00:00.00000Z\"}", "[a/s//2026-02-28 23:00:00 +0000 UTC]", "<nil>"},
	{"{\"auditID\":\"a\",\"stage\":\"s\",\"stageTimestamp\":\"2026-02-28 23:00:00.000000Z\"}", "[]", "not an audit event: stageTimestamp \"2026-02-28 23:00:00.000000Z\" is not an RFC 3339 time"},
	{"{\"auditID\":\"a\",\"stage\":\"s\",\"stageTimestamp\":\"+026-02-28T23:00:00.000000Z\"}", "[]", "not an audit event: stageTimestamp \"+026-02-28T23:00:00.000000Z\" is not an RFC 3339 time"},
	{"{\"auditID\":\"a\",\"stage\":\"s\",\"stageTimestamp\":\"2026-02-28T23:00:00Z\"}", "[a/s//2026-02-28 23:00:00 +0000 UTC]", "<nil>"},
	{"{\"auditID\":\"a\",\"stage\":\"s\",\"stageTimestamp\":5}", "[]", "not an audit event: stageTimestamp is a JSON number, want a string"},
	{"{\"auditID\":\"a\xff\",\"stage\":\"s\"}", "[]", "invalid UTF-8"},
	{"{\"auditID\":\"a\",\"stage\":\"s\"}\xff", "[]", "invalid UTF-8"},
	{"\xff{\"auditID\":\"a\",\"stage\":\"s\"}", "[]", "invalid UTF-8"},
	{"{\"auditID\":\"a\",\"stage\":\"s\",\"x\":\"\xc3\"}", "[]", "invalid UTF-8"},
	{"{\"auditID\":\"a\",\"stage\":\"s\",\"verb\":\"0123456789012345678901234567890123456789012345678901234567890123456789\xe2\x82\"}", "[]", "invalid UTF-8"},
	{"{\"auditID\":\"a\",\"stage\":\"s\"}x", "[]", "not JSON: data after the object at offset 27"},
	{"{\"auditID\":\"a\",\"stage\":\"s\"} ", "[a/s//0001-01-01 00:00:00 +0000 UTC]", "<nil>"},
	{" {\"auditID\":\"a\",\"stage\":\"s\"}", "[a/s//0001-01-01 00:00:00 +0000 UTC]", "<nil>"},
	{"[{\"auditID\":\"a\",\"stage\":\"s\"}]", "[]", "not an audit event: a JSON array"},
	{"\"x\"", "[]", "not an audit event: a JSON string"},
	{"", "[]", "not JSON: want a JSON object at offset 0"},
	{"{", "[]", "not JSON: want an object key at offset 1"},
	{"{}", "[]", "not an audit event: no auditID or stage"},
	{"{\"kind\":\"EventList\",\"items\":[{\"auditID\":\"a\",\"stage\":\"s\"},{\"auditID\":\"b\"},{\"auditID\":\"c\",\"stage\":\"s\",\"verb\":1}]}", "[a/s//0001-01-01 00:00:00 +0000 UTC]", "item 1: not an audit event: no auditID or stage\nitem 2: not an audit event: verb is a JSON number, want a string"},
	{"{\"kind\":\"EventList\",\"items\":[{\"auditID\":\"a\",\"stage\":\"s\"},]}", "[]", "not JSON: invalid character ']' at offset 57"},
	{"{\"kind\":\"EventList\",\"items\":[]}", "[]", "empty EventList"},
}

func TestDecodeErrorsAsBefore(t *testing.T) {
	d := NewDecoder(0)
	for _, c := range decodeCases {
		var got []string
		err := d.Decode([]byte(c.in), func(ev *Event) error {
			got = append(got, ev.AuditID+"/"+ev.Stage+"/"+ev.Verb+"/"+ev.StageTimestamp.String())
			return nil
		})
		if fmt.Sprint(got) != c.events || fmt.Sprint(err) != c.err {
			t.Errorf("Decode(%q):\n got %s, %v\nwant %s, %s", c.in, fmt.Sprint(got), err, c.events, c.err)
		}
		checkAgainstReference(t, []byte(c.in), false)
	}
}

// fastPathEdgeCases are valid events that leave the fast paths for the general ones: keys
// with escapes or space before the colon, strings whose first escape comes after 64 bytes,
// escapes at a string's ends, unicode escapes and surrogate pairs, nested objects skipped.
var fastPathEdgeCases = []string{
	`{"audit\u0049D":"a","st\u0061ge":"s","ver\"b":"x","verb" : "get"}`,
	`{"auditID":"\"a\"","stage":"s\\","requestURI":"/api/v1/namespaces/default/pods/0123456789012345678901234567890123456789012345678901234567890123456789\u00e9?x=\"1\""}`,
	`{"auditID":"a","stage":"s","userAgent":"0123456789012345678901234567890123456789012345678901234567890123\ud83d\ude00\ud800","verb":"\u0067et"}`,
	`{"auditID":"a","stage":"s","responseStatus":{"metadata":{"a":{"b":[{"c":"\"}"}]}},"details":{"name":"x\"y","causes":[{"reason":"r","message":"\\"}]},"message":"leases \"x\" not found","code":404}}`,
	`{"auditID":"a","stage":"s","annotations":{"k\"":"v\"","authorization.k8s.io/reason":"RBAC: allowed by ClusterRoleBinding \"system:kube-controller-manager\" of ClusterRole \"system:kube-controller-manager\" to User \"system:kube-controller-manager\""}}`,
	"{\"auditID\":\"a\",\"stage\":\"s\",\"user\":{\"username\":\"\u00e9t\u00e9 \u4e16\u754c\",\"groups\":[\"a\\u0000b\",\"\"]}}",
}

func TestFastPathEdgeCasesAgreeWithReference(t *testing.T) {
	for _, c := range fastPathEdgeCases {
		checkAgainstReference(t, []byte(c), true)
	}
}
