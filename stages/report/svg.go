package report

import (
	"fmt"
	"html"
	"math"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Plot geometry in SVG user units (CSS pixels at 100% zoom). Two plots
// fit side by side in a 1200-pixel-wide window.
const (
	plotW, plotH               = 560, 290
	marginL, marginR           = 58, 16
	marginT, marginB           = 34, 42
	innerW                     = plotW - marginL - marginR
	innerH                     = plotH - marginT - marginB
	maxMarkers                 = 60 // above this many points, lines only
	tickTarget                 = 6
	fontSize, smallFontSize    = 13, 11
	strokeMain, strokeSecond   = 2.2, 1.3
	bandOpacity, legendSwatchW = 0.22, 14
)

// palette is colour-blind-safe (Okabe & Ito 2008); the first colour is
// the round-wide series.
var palette = []string{"#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#F0E442", "#000000"}

type point struct{ x, y float64 }

type series struct {
	name   string
	color  string
	width  float64
	dashed bool
	points []point // y NaN = not measured: the line breaks there
}

// band is a filled range (lo..hi per x), e.g. regret p10–p90.
type band struct {
	name   string
	color  string
	lo, hi []point // same x values; a NaN on either edge breaks the band
}

type chart struct {
	id     string
	title  string
	yLabel string
	// yMin, yMax fix the y range; NaN means fit to the data.
	yMin, yMax float64
	series     []series
	band       *band
	zeroLine   bool
}

// svg renders c as one standalone <svg> element.
func (c chart) svg() string {
	var b strings.Builder
	h := c.height()
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" id="%s" class="plot" width="%d" height="%d" viewBox="0 0 %d %d" role="img" aria-labelledby="%s-title">`,
		c.id, plotW, h, plotW, h, c.id)
	fmt.Fprintf(&b, `<title id="%s-title">%s</title>`, c.id, esc(c.title))
	fmt.Fprintf(&b, `<rect x="0" y="0" width="%d" height="%d" fill="#ffffff"/>`, plotW, h)
	fmt.Fprintf(&b, `<text x="%d" y="20" font-size="15" font-weight="bold" fill="#222">%s</text>`, marginL, esc(c.title))

	xs, ys := c.extent()
	if len(xs) == 0 {
		c.frame(&b, 0, 1, 0, 1, nil, nil)
		fmt.Fprintf(&b, `<text x="%s" y="%s" font-size="%d" fill="#777" text-anchor="middle">no data</text>`,
			num(marginL+innerW/2), num(marginT+innerH/2), fontSize)
		b.WriteString(`</svg>`)
		return b.String()
	}
	x0, x1 := minMax(xs)
	if x0 == x1 {
		x0, x1 = x0-1, x1+1
	}
	y0, y1 := c.yMin, c.yMax
	if math.IsNaN(y0) || math.IsNaN(y1) {
		lo, hi := minMax(ys)
		if c.zeroLine {
			lo, hi = math.Min(lo, 0), math.Max(hi, 0)
		}
		if lo == hi {
			lo, hi = lo-0.5, hi+0.5
		}
		step := niceStep((hi - lo) / tickTarget)
		lo, hi = math.Floor(lo/step)*step, math.Ceil(hi/step)*step
		if math.IsNaN(y0) {
			y0 = lo
		}
		if math.IsNaN(y1) {
			y1 = hi
		}
	}
	xt := integerTicks(x0, x1)
	yt := ticks(y0, y1)
	c.frame(&b, x0, x1, y0, y1, xt, yt)
	px := func(x float64) float64 { return marginL + (x-x0)/(x1-x0)*innerW }
	py := func(y float64) float64 { return marginT + (1-(y-y0)/(y1-y0))*innerH }

	if c.zeroLine && y0 < 0 && y1 > 0 {
		fmt.Fprintf(&b, `<line x1="%s" y1="%s" x2="%s" y2="%s" stroke="#888" stroke-width="1"/>`,
			num(px(x0)), num(py(0)), num(px(x1)), num(py(0)))
	}
	if c.band != nil && len(c.band.lo) > 0 {
		for _, seg := range segments(c.band.lo, c.band.hi) {
			var pts []string
			for _, p := range seg.hi {
				pts = append(pts, num(px(p.x))+","+num(py(p.y)))
			}
			for i := len(seg.lo) - 1; i >= 0; i-- {
				pts = append(pts, num(px(seg.lo[i].x))+","+num(py(seg.lo[i].y)))
			}
			fmt.Fprintf(&b, `<polygon class="band" points="%s" fill="%s" fill-opacity="%s" stroke="none"/>`,
				strings.Join(pts, " "), c.band.color, num(bandOpacity))
		}
	}
	for _, s := range c.series {
		dash := ""
		if s.dashed {
			dash = ` stroke-dasharray="6 4"`
		}
		for _, run := range splitNaN(s.points) {
			if len(run) == 1 {
				continue // a lone point is drawn by its marker below
			}
			var pts []string
			for _, p := range run {
				pts = append(pts, num(px(p.x))+","+num(py(p.y)))
			}
			fmt.Fprintf(&b, `<polyline class="series" points="%s" fill="none" stroke="%s" stroke-width="%s"%s/>`,
				strings.Join(pts, " "), s.color, num(s.width), dash)
		}
		measured := 0
		for _, p := range s.points {
			if !math.IsNaN(p.y) {
				measured++
			}
		}
		// Markers on the main series only: per-skill lines stay thin.
		if measured <= maxMarkers && s.width == strokeMain {
			for _, p := range s.points {
				if !math.IsNaN(p.y) {
					fmt.Fprintf(&b, `<circle cx="%s" cy="%s" r="2.8" fill="%s"/>`, num(px(p.x)), num(py(p.y)), s.color)
				}
			}
		}
	}
	c.legend(&b)
	b.WriteString(`</svg>`)
	return b.String()
}

// frame draws the plot area, grid, ticks and axis labels.
func (c chart) frame(b *strings.Builder, x0, x1, y0, y1 float64, xt, yt []float64) {
	fmt.Fprintf(b, `<rect x="%d" y="%d" width="%d" height="%d" fill="#fafafa" stroke="#bbb"/>`, marginL, marginT, innerW, innerH)
	for _, t := range yt {
		y := marginT + (1-(t-y0)/(y1-y0))*innerH
		fmt.Fprintf(b, `<line x1="%d" y1="%s" x2="%d" y2="%s" stroke="#e4e4e4"/>`, marginL, num(y), marginL+innerW, num(y))
		fmt.Fprintf(b, `<text x="%d" y="%s" font-size="%d" fill="#444" text-anchor="end">%s</text>`, marginL-6, num(y+4), smallFontSize, tickLabel(t))
	}
	for _, t := range xt {
		x := marginL + (t-x0)/(x1-x0)*innerW
		fmt.Fprintf(b, `<line x1="%s" y1="%d" x2="%s" y2="%d" stroke="#999"/>`, num(x), marginT+innerH, num(x), marginT+innerH+4)
		fmt.Fprintf(b, `<text x="%s" y="%d" font-size="%d" fill="#444" text-anchor="middle">%s</text>`, num(x), marginT+innerH+17, smallFontSize, tickLabel(t))
	}
	fmt.Fprintf(b, `<text x="%d" y="%d" font-size="%d" fill="#222" text-anchor="middle">round</text>`, marginL+innerW/2, plotH-6, fontSize)
	fmt.Fprintf(b, `<text x="14" y="%d" font-size="%d" fill="#222" text-anchor="middle" transform="rotate(-90 14 %d)">%s</text>`,
		marginT+innerH/2, fontSize, marginT+innerH/2, esc(c.yLabel))
}

// legendEntry is one row item of a plot's legend.
type legendEntry struct {
	name, color string
	dashed, box bool
}

// legendRowH is the height of one legend row under the plot.
const legendRowH = 16

// legendLayout places the entries (series, then band) in rows under the
// x axis, wrapping at the plot width, so the legend never hides data.
// It returns no entries when there is only one thing to tell apart.
func (c chart) legendLayout() (es []legendEntry, xs, rows []int) {
	for _, s := range c.series {
		es = append(es, legendEntry{s.name, s.color, s.dashed, false})
	}
	if c.band != nil {
		es = append(es, legendEntry{c.band.name, c.band.color, false, true})
	}
	if len(es) < 2 {
		return nil, nil, nil
	}
	x, row := marginL, 0
	for _, e := range es {
		// Sans-serif at 11 px averages under 6.5 px a character.
		w := legendSwatchW + 6 + int(math.Ceil(6.5*float64(len([]rune(e.name))))) + 16
		if x+w > plotW-marginR && x > marginL {
			x, row = marginL, row+1
		}
		xs = append(xs, x)
		rows = append(rows, row)
		x += w
	}
	return es, xs, rows
}

// height is the SVG height: the plot plus its legend rows.
func (c chart) height() int {
	_, _, rows := c.legendLayout()
	if len(rows) == 0 {
		return plotH
	}
	return plotH + (rows[len(rows)-1]+1)*legendRowH + 4
}

func (c chart) legend(b *strings.Builder) {
	es, xs, rows := c.legendLayout()
	if len(es) == 0 {
		return
	}
	b.WriteString(`<g class="legend">`)
	for i, e := range es {
		x, cy := xs[i], plotH+rows[i]*legendRowH+6
		if e.box {
			fmt.Fprintf(b, `<rect x="%d" y="%d" width="%d" height="9" fill="%s" fill-opacity="%s"/>`, x, cy-4, legendSwatchW, e.color, num(bandOpacity*2))
		} else {
			dash := ""
			if e.dashed {
				dash = ` stroke-dasharray="4 2"`
			}
			fmt.Fprintf(b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="2.5"%s/>`, x, cy, x+legendSwatchW, cy, e.color, dash)
		}
		fmt.Fprintf(b, `<text x="%d" y="%d" font-size="%d" fill="#222">%s</text>`, x+legendSwatchW+6, cy+4, smallFontSize, esc(e.name))
	}
	b.WriteString(`</g>`)
}

// extent collects every finite x and y the chart draws.
func (c chart) extent() (xs, ys []float64) {
	add := func(ps []point) {
		for _, p := range ps {
			if !math.IsNaN(p.y) {
				xs = append(xs, p.x)
				ys = append(ys, p.y)
			}
		}
	}
	for _, s := range c.series {
		add(s.points)
	}
	if c.band != nil {
		add(c.band.lo)
		add(c.band.hi)
	}
	return xs, ys
}

type bandSeg struct{ lo, hi []point }

// segments returns the runs of rounds where both band edges are measured,
// so a band never bridges a round without data.
func segments(lo, hi []point) []bandSeg {
	var out []bandSeg
	start := -1
	for i := 0; i <= len(lo); i++ {
		ok := i < len(lo) && !math.IsNaN(lo[i].y) && !math.IsNaN(hi[i].y)
		if ok && start < 0 {
			start = i
		}
		if !ok && start >= 0 {
			if i-start >= 2 {
				out = append(out, bandSeg{lo[start:i], hi[start:i]})
			}
			start = -1
		}
	}
	return out
}

// splitNaN returns the runs of consecutive measured points.
func splitNaN(ps []point) [][]point {
	var out [][]point
	var cur []point
	for _, p := range ps {
		if math.IsNaN(p.y) {
			if len(cur) > 0 {
				out = append(out, cur)
			}
			cur = nil
			continue
		}
		cur = append(cur, p)
	}
	if len(cur) > 0 {
		out = append(out, cur)
	}
	return out
}

func minMax(v []float64) (lo, hi float64) {
	lo, hi = v[0], v[0]
	for _, x := range v[1:] {
		lo, hi = math.Min(lo, x), math.Max(hi, x)
	}
	return lo, hi
}

// niceStep rounds a raw tick step up to 1, 2 or 5 × 10^k.
func niceStep(raw float64) float64 {
	if raw <= 0 || math.IsNaN(raw) || math.IsInf(raw, 0) {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 5, 10} {
		if raw <= m*p*(1+1e-9) {
			return m * p
		}
	}
	return 10 * p
}

// ticks returns about tickTarget nice values covering [lo, hi].
func ticks(lo, hi float64) []float64 {
	step := niceStep((hi - lo) / tickTarget)
	var out []float64
	for i := math.Ceil(lo/step - 1e-9); ; i++ {
		t := i * step
		if t > hi+step*1e-9 {
			break
		}
		if math.Abs(t) < step*1e-9 {
			t = 0
		}
		out = append(out, t)
	}
	return out
}

// integerTicks returns ticks for round numbers: whole, nice steps.
func integerTicks(lo, hi float64) []float64 {
	step := math.Max(1, niceStep((hi-lo)/tickTarget))
	step = math.Ceil(step)
	var out []float64
	for t := math.Ceil(lo/step) * step; t <= hi+1e-9; t += step {
		out = append(out, t)
	}
	return out
}

func tickLabel(v float64) string {
	s := strconv.FormatFloat(v, 'f', 3, 64)
	s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	if s == "-0" {
		s = "0"
	}
	return s
}

// num formats an SVG coordinate with fixed precision, so output is
// byte-identical across runs and platforms.
func num(v float64) string {
	return strconv.FormatFloat(v, 'f', 2, 64)
}

// esc makes s safe as SVG text: XML-escaped, with invalid UTF-8 and the
// characters XML 1.0 forbids (most C0 controls, surrogates, U+FFFE/FFFF)
// replaced by U+FFFD, so skill names from LLM output cannot break a plot.
func esc(s string) string {
	clean := strings.Map(func(r rune) rune {
		switch {
		case r == '\t' || r == '\n' || r == '\r':
			return r
		case r < 0x20, r >= 0xD800 && r <= 0xDFFF, r == 0xFFFE, r == 0xFFFF:
			return utf8.RuneError
		}
		return r
	}, strings.ToValidUTF8(s, "\uFFFD"))
	return html.EscapeString(clean)
}
