// Package chart draws the trend charts of the weekly report as PNG images.
package chart

import (
	"bytes"
	"fmt"
	"image/color"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"

	"github.com/auditlens/auditlens/services/report/weekly"
)

// Size of every chart in pixels (drawn at 72 DPI, so one point is one pixel).
const (
	Width  = 560
	Height = 240
)

var (
	findingsColor = color.RGBA{R: 0x54, G: 0x8b, B: 0xd6, A: 0xff}
	blockingColor = color.RGBA{R: 0xd4, G: 0x4c, B: 0x3d, A: 0xff}
)

// Daily draws this week's findings and blocking findings per day as grouped bars.
func Daily(r *weekly.Report) ([]byte, error) {
	p := plot.New()
	p.Title.Text = "Findings per day, week ending " + r.WeekEnding.String()
	p.Y.Label.Text = "findings"
	p.Y.Min = 0
	names := make([]string, len(r.Daily))
	all := make(plotter.Values, len(r.Daily))
	blk := make(plotter.Values, len(r.Daily))
	for i, d := range r.Daily {
		names[i] = d.Start.Format("Mon 02")
		all[i] = float64(d.Findings)
		blk[i] = float64(d.Blocking)
	}
	w := vg.Points(18)
	a, err := plotter.NewBarChart(all, w)
	if err != nil {
		return nil, fmt.Errorf("daily chart: %w", err)
	}
	a.Color, a.LineStyle.Width, a.Offset = findingsColor, 0, -w/2
	b, err := plotter.NewBarChart(blk, w)
	if err != nil {
		return nil, fmt.Errorf("daily chart: %w", err)
	}
	b.Color, b.LineStyle.Width, b.Offset = blockingColor, 0, w/2
	p.Add(a, b)
	p.Legend.Add("all", a)
	p.Legend.Add("blocking "+r.Target.String(), b)
	p.Legend.Top, p.Legend.Left = true, true
	p.NominalX(names...)
	return encode(p)
}

// Weekly draws findings and blocking findings per week as lines, oldest week first.
func Weekly(r *weekly.Report) ([]byte, error) {
	p := plot.New()
	p.Title.Text = "Findings per week"
	p.Y.Label.Text = "findings"
	p.Y.Min = 0
	names := make([]string, len(r.Weekly))
	all := make(plotter.XYs, len(r.Weekly))
	blk := make(plotter.XYs, len(r.Weekly))
	for i, pt := range r.Weekly {
		names[i] = pt.Start.Format("01-02")
		all[i] = plotter.XY{X: float64(i), Y: float64(pt.Findings)}
		blk[i] = plotter.XY{X: float64(i), Y: float64(pt.Blocking)}
	}
	for _, s := range []struct {
		name string
		xys  plotter.XYs
		c    color.Color
	}{{"all", all, findingsColor}, {"blocking " + r.Target.String(), blk, blockingColor}} {
		l, pts, err := plotter.NewLinePoints(s.xys)
		if err != nil {
			return nil, fmt.Errorf("weekly chart: %w", err)
		}
		l.Color, l.Width = s.c, vg.Points(2)
		pts.Color, pts.Shape = s.c, draw.CircleGlyph{}
		p.Add(l, pts)
		p.Legend.Add(s.name, l, pts)
	}
	p.Legend.Top, p.Legend.Left = true, true
	p.NominalX(names...)
	return encode(p)
}

// countTicks labels the default ticks as plain numbers (counts): "250", not "250.00".
type countTicks struct{}

func (countTicks) Ticks(min, max float64) []plot.Tick {
	ts := plot.DefaultTicks{}.Ticks(min, max)
	for i := range ts {
		if ts[i].Label != "" {
			ts[i].Label = strconv.FormatFloat(ts[i].Value, 'f', -1, 64)
		}
	}
	return ts
}

func encode(p *plot.Plot) ([]byte, error) {
	// Headroom above the highest value for the legend.
	p.Y.Max = p.Y.Max*1.3 + 1
	p.Y.Tick.Marker = countTicks{}
	c := vgimg.NewWith(vgimg.UseWH(Width, Height), vgimg.UseDPI(72))
	p.Draw(draw.New(c))
	var buf bytes.Buffer
	if _, err := (vgimg.PngCanvas{Canvas: c}).WriteTo(&buf); err != nil {
		return nil, fmt.Errorf("encode png: %w", err)
	}
	return buf.Bytes(), nil
}
