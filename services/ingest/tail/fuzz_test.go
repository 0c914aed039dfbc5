package tail_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/auditlens/auditlens/services/ingest/tail"
)

// FuzzLines writes arbitrary content in two pieces and checks the follower hands out
// exactly its non-blank lines, never half of one.
func FuzzLines(f *testing.F) {
	f.Add([]byte("{\"a\":1}\n{\"b\":2}\n"), 5)
	f.Add([]byte("x\r\n\n  \ny"), 0)
	f.Add(bytes.Repeat([]byte("z"), 300), 100)
	f.Fuzz(func(t *testing.T, content []byte, split int) {
		if split < 0 || split > len(content) {
			split = len(content) / 2
		}
		path := filepath.Join(t.TempDir(), "audit.log")
		if err := os.WriteFile(path, content[:split], 0o600); err != nil {
			t.Fatal(err)
		}
		const maxLine = 64
		cfg := tail.DefaultConfig()
		cfg.Path, cfg.MaxLineSize, cfg.ReadBuffer = path, maxLine, 2*maxLine
		fl := tail.New(cfg, nil)
		defer fl.Close()
		var got [][]byte
		tooLong := 0
		drain := func() {
			for {
				c, err := fl.Next(context.Background(), 3, 100, false)
				if err != nil {
					t.Fatal(err)
				}
				for _, l := range c.Lines {
					if errors.Is(l.Err, tail.ErrLineTooLong) {
						tooLong++
						continue
					}
					if l.Err != nil {
						t.Fatalf("unexpected %v", l.Err)
					}
					got = append(got, append([]byte(nil), l.Data...))
				}
				if c.CaughtUp {
					return
				}
			}
		}
		drain()
		fa, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := fa.Write(content[split:]); err != nil {
			t.Fatal(err)
		}
		fa.Close()
		drain()

		var want [][]byte
		wantLong := 0
		var complete []byte
		if i := bytes.LastIndexByte(content, '\n'); i >= 0 {
			complete = content[:i+1]
		}
		for _, l := range bytes.SplitAfter(complete, []byte("\n")) {
			l = bytes.TrimSuffix(l, []byte("\n"))
			l = bytes.TrimSuffix(l, []byte("\r"))
			if len(bytes.TrimSpace(l)) == 0 {
				continue
			}
			if len(l) > maxLine {
				wantLong++
				continue
			}
			want = append(want, l)
		}
		if len(got) != len(want) || tooLong != wantLong {
			t.Fatalf("got %d lines (%d too long), want %d (%d too long)", len(got), tooLong, len(want), wantLong)
		}
		for i := range want {
			if !bytes.Equal(got[i], want[i]) {
				t.Fatalf("line %d = %q, want %q", i, got[i], want[i])
			}
		}
	})
}
