package jsonstr_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"testing"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/auditlens/auditlens/lib/jsonstr"
)

// BenchmarkUnquote compares, on the same literals, Unquote with the byte loop the chDB
// driver used before it (oldDecodeString below, kept as the baseline) and with
// encoding/json into a string.
func BenchmarkUnquote(b *testing.B) {
	for _, lit := range []struct{ name, s string }{
		{"plain-40B", `"system:serviceaccount:kube-system:deployment-controller"`},
		{"escaped-slashes-60B", `"\/apis\/apps\/v1\/namespaces\/kube-system\/deployments\/coredns"`},
		{"unicode-escapes-30B", `"caf\u00e9 \u4e2d\u6587 \ud83d\ude00 ok"`},
		{"long-1KB", `"` + strings1K + `"`},
	} {
		data := []byte(lit.s)
		b.Run(lit.name+"/jsonstr", func(b *testing.B) {
			b.SetBytes(int64(len(data)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := jsonstr.Unquote(data); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(lit.name+"/old-chdb-loop", func(b *testing.B) {
			b.SetBytes(int64(len(data)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := oldDecodeString(data); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(lit.name+"/encoding-json", func(b *testing.B) {
			b.SetBytes(int64(len(data)))
			b.ReportAllocs()
			for b.Loop() {
				var s string
				if err := json.Unmarshal(data, &s); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

var strings1K = func() string {
	s := ""
	for len(s) < 1000 {
		s += `{\"kind\":\"Pod\",\"name\":\"web-0\"}\n`
	}
	return s
}()

// oldDecodeString is the chDB driver's decodeString before this package, the baseline of
// BenchmarkUnquote.
func oldDecodeString(b []byte) (string, error) {
	if len(b) < 2 || b[0] != '"' || b[len(b)-1] != '"' {
		return "", fmt.Errorf("json: want a string, got %.40q", b)
	}
	b = b[1 : len(b)-1]
	out := make([]byte, 0, len(b))
	for i := 0; i < len(b); i++ {
		c := b[i]
		if c != '\\' {
			out = append(out, c)
			continue
		}
		i++
		if i >= len(b) {
			return "", errors.New("json: bad escape")
		}
		switch b[i] {
		case '"', '\\', '/':
			out = append(out, b[i])
		case 'b':
			out = append(out, '\b')
		case 'f':
			out = append(out, '\f')
		case 'n':
			out = append(out, '\n')
		case 'r':
			out = append(out, '\r')
		case 't':
			out = append(out, '\t')
		case 'u':
			r, n, err := oldReadU(b, i+1)
			if err != nil {
				return "", err
			}
			i += n
			if utf16.IsSurrogate(r) && i+2 < len(b) && b[i+1] == '\\' && b[i+2] == 'u' {
				r2, n2, err := oldReadU(b, i+3)
				if err == nil {
					if d := utf16.DecodeRune(r, r2); d != utf8.RuneError {
						r = d
						i += 2 + n2
					}
				}
			}
			out = utf8.AppendRune(out, r)
		default:
			return "", fmt.Errorf("json: bad escape \\%c", b[i])
		}
	}
	return string(out), nil
}

func oldReadU(b []byte, i int) (rune, int, error) {
	if i+4 > len(b) {
		return 0, 0, errors.New("json: short \\u escape")
	}
	v, err := strconv.ParseUint(string(b[i:i+4]), 16, 32)
	if err != nil {
		return 0, 0, fmt.Errorf("json: bad \\u escape: %w", err)
	}
	return rune(v), 4, nil
}
