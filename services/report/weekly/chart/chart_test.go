package chart

import (
	"bytes"
	"image/png"
	"testing"

	"github.com/auditlens/auditlens/services/report/weekly"
	"github.com/auditlens/auditlens/services/report/weekly/fixture"
)

func TestChartsArePNGsOfTheSize(t *testing.T) {
	empty := fixture.Report()
	for i := range empty.Daily {
		empty.Daily[i].Findings, empty.Daily[i].Blocking = 0, 0
	}
	for i := range empty.Weekly {
		empty.Weekly[i].Findings, empty.Weekly[i].Blocking = 0, 0
	}
	for _, tc := range []struct {
		name string
		r    *weekly.Report
		draw func(*weekly.Report) ([]byte, error)
	}{
		{"daily", fixture.Report(), Daily},
		{"weekly", fixture.Report(), Weekly},
		{"daily-empty", empty, Daily},
		{"weekly-empty", empty, Weekly},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := tc.draw(tc.r)
			if err != nil {
				t.Fatal(err)
			}
			img, err := png.Decode(bytes.NewReader(b))
			if err != nil {
				t.Fatalf("not a PNG: %v", err)
			}
			if s := img.Bounds().Size(); s.X != Width || s.Y != Height {
				t.Fatalf("size %v, want %dx%d", s, Width, Height)
			}
			// Something was drawn: more than one colour.
			first := img.At(0, 0)
			varied := false
			for y := 0; y < Height && !varied; y += 3 {
				for x := 0; x < Width; x += 3 {
					if img.At(x, y) != first {
						varied = true
						break
					}
				}
			}
			if !varied {
				t.Fatal("chart is blank")
			}
		})
	}
}
