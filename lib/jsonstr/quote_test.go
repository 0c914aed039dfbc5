package jsonstr

import (
	"math/rand/v2"
	"testing"
)

// QuoteOrEscape and End agree with a byte loop on every length and position, including the bytes
// whose XOR borrows could fool a careless has-zero-byte test ('!' = '"'+... neighbours, 0x80+).
func TestQuoteOrEscape(t *testing.T) {
	naive := func(b []byte) int {
		for i, c := range b {
			if c == '"' || c == '\\' {
				return i
			}
		}
		return len(b)
	}
	alphabet := []byte{'"', '\\', '!', '#', '[', ']', 0, 1, 0x22 ^ 0x80, 0x5c ^ 0x80, 0xff, 'a', 'z'}
	r := rand.New(rand.NewPCG(1, 2))
	for n := 0; n < 80; n++ {
		for trial := 0; trial < 2000; trial++ {
			b := make([]byte, n)
			for i := range b {
				if r.IntN(4) == 0 {
					b[i] = alphabet[r.IntN(len(alphabet))]
				} else {
					b[i] = byte(r.IntN(256))
				}
			}
			want := naive(b)
			if got := QuoteOrEscape(b); got != want {
				t.Fatalf("QuoteOrEscape(%q): %d, want %d", b, got, want)
			}
			if got := End(b); got != want {
				t.Fatalf("End(%q): %d, want %d", b, got, want)
			}
		}
	}
}
