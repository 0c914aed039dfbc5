package printable

import (
	"bytes"
	"encoding/json"
	"testing"
	"unicode"
)

func TestString(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"kubectl/v1.29.0 (linux/amd64)", "kubectl/v1.29.0 (linux/amd64)"},
		{"héllo wörld 日本", "héllo wörld 日本"},
		{"evil\x1b]0;pwned\x07\x1b[2J", `evil\x1b]0;pwned\a\x1b[2J`},
		{"a\nFAKE: line\r\tb", `a\nFAKE: line\r\tb`},
		{"rtl\u202eexe.txt", `rtl\u202eexe.txt`},
		{"bad\xffutf8", `bad\xffutf8`},
		{"\u0085nel", `\u0085nel`},
	} {
		got := String(c.in)
		if got != c.want {
			t.Errorf("String(%q) = %q, want %q", c.in, got, c.want)
		}
		for _, r := range got {
			if !unicode.IsPrint(r) {
				t.Errorf("String(%q) keeps %U", c.in, r)
			}
		}
	}
}

func TestTruncate(t *testing.T) {
	if got := Truncate("日本語のユーザーエージェント", 10); got != "日本..." {
		t.Errorf("Truncate = %q", got)
	}
	if got := Truncate("a\x1bb", 3); got != `a\x1bb` {
		t.Errorf("Truncate(n<4) = %q", got)
	}
	if got := Truncate("abcdef", 5); got != "ab..." {
		t.Errorf("Truncate = %q", got)
	}
}

func FuzzString(f *testing.F) {
	f.Add("evil\x1b[2J\n\xff")
	f.Fuzz(func(t *testing.T, s string) {
		for _, r := range String(s) {
			if !unicode.IsPrint(r) {
				t.Fatalf("String(%q) keeps %U", s, r)
			}
		}
	})
}

func TestJSON(t *testing.T) {
	in, _ := json.Marshal(map[string]string{"ua": "a\u009b2Jb\x7fc\x1bé"})
	out := JSON(nil, in)
	if bytes.ContainsAny(out, "\x7f\u009b\x1b") {
		t.Errorf("JSON kept a control character: %q", out)
	}
	var back map[string]string
	if err := json.Unmarshal(out, &back); err != nil || back["ua"] != "a\u009b2Jb\x7fc\x1bé" {
		t.Errorf("JSON changed the value: %q, %v", back["ua"], err)
	}
}
