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

// skillPalette colours the per-skill lines (dashed after the sixth); it
// leaves out the blue of the designed population and the black of the
// pool.
var skillPalette = palette[1:7]

// poolColor is the round-wide series of the rounds that play the pool.
const poolColor = "#000000"

// regenColor marks regeneration rounds, behind the data.
const regenColor = "#9a9a9a"

type point struct {
	x, y float64
	pop  int // population (report.population): lines break where it changes
}

// axis is the round axis all plots share (commonAxis).
type axis struct {
	x0, x1 float64   // the x range drawn
	regen  []float64 // regeneration rounds to mark; nil for none
}

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
	axis       axis
	// noData is the text of a plot with no measured round; "" means
	// "no data".
	noData string
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

	x0, x1 := c.axis.x0, c.axis.x1
	if !(x1 > x0) {
		x0, x1 = 0, 1
	}
	_, ys := c.extent()
	if len(ys) == 0 {
		c.frame(&b, x0, x1, 0, 1, integerTicks(x0, x1), nil)
		text := c.noData
		if text == "" {
			text = "no data"
		}
		fmt.Fprintf(&b, `<text class="no-data" x="%s" y="%s" font-size="%d" fill="#777" text-anchor="middle">%s</text>`,
			num(marginL+innerW/2), num(marginT+innerH/2), fontSize, esc(text))
		b.WriteString(`</svg>`)
		return b.String()
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

	for _, x := range c.axis.regen {
		fmt.Fprintf(&b, `<line class="regen" data-series="%s" x1="%s" y1="%d" x2="%s" y2="%d" stroke="%s" stroke-width="1" stroke-dasharray="3 3"/>`,
			esc(regenName), num(px(x)), marginT, num(px(x)), marginT+innerH, regenColor)
	}
	if c.zeroLine && y0 < 0 && y1 > 0 {
		fmt.Fprintf(&b, `<line x1="%s" y1="%s" x2="%s" y2="%s" stroke="#888" stroke-width="1"/>`,
			num(px(x0)), num(py(0)), num(px(x1)), num(py(0)))
	}
	if bd := c.band; bd != nil && len(bd.lo) > 0 {
		// Adjacent measured rounds: a filled band. A lone one: a bar of
		// the same fill from p10 to p90, so the legend's box means both.
		for _, seg := range segments(bd.lo, bd.hi) {
			if len(seg.lo) == 1 {
				x, lo, hi := px(seg.lo[0].x), py(seg.lo[0].y), py(seg.hi[0].y)
				fmt.Fprintf(&b, `<rect class="bar" data-series="%s" x="%s" y="%s" width="%d" height="%s" fill="%s" fill-opacity="%s" stroke="%s" stroke-opacity="%s"/>`,
					esc(bd.name), num(x-barW/2), num(hi), barW, num(math.Max(lo-hi, 1)), bd.color, num(bandOpacity), bd.color, num(bandEdgeOpacity))
				continue
			}
			var pts []string
			for _, p := range seg.hi {
				pts = append(pts, num(px(p.x))+","+num(py(p.y)))
			}
			for i := len(seg.lo) - 1; i >= 0; i-- {
				pts = append(pts, num(px(seg.lo[i].x))+","+num(py(seg.lo[i].y)))
			}
			fmt.Fprintf(&b, `<polygon class="band" data-series="%s" points="%s" fill="%s" fill-opacity="%s" stroke="%s" stroke-opacity="%s"/>`,
				esc(bd.name), strings.Join(pts, " "), bd.color, num(bandOpacity), bd.color, num(bandEdgeOpacity))
		}
	}
	for _, s := range c.series {
		dash := ""
		if s.dashed {
			dash = ` stroke-dasharray="6 4"`
		}
		var lone []point
		for _, run := range splitNaN(s.points) {
			if len(run) == 1 {
				lone = append(lone, run[0])
				continue
			}
			var pts []string
			for _, p := range run {
				pts = append(pts, num(px(p.x))+","+num(py(p.y)))
			}
			fmt.Fprintf(&b, `<polyline class="series" data-series="%s" points="%s" fill="none" stroke="%s" stroke-width="%s"%s/>`,
				esc(s.name), strings.Join(pts, " "), s.color, num(s.width), dash)
		}
		// Markers on every point of a main series (up to maxMarkers), and
		// on every lone point of any series, which no line shows.
		marks := lone
		if s.width == strokeMain && s.measured() <= maxMarkers {
			marks = nil
			for _, p := range s.points {
				if !math.IsNaN(p.y) {
					marks = append(marks, p)
				}
			}
		}
		for _, p := range marks {
			fmt.Fprintf(&b, `<circle class="marker" data-series="%s" cx="%s" cy="%s" r="%s" fill="%s"/>`,
				esc(s.name), num(px(p.x)), num(py(p.y)), num(s.markerR()), s.color)
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

// barW is the width of a lone round's p10–p90 bar.
const barW = 10

// bandEdgeOpacity outlines bands, bars and the band's legend swatch.
const bandEdgeOpacity = 0.55

// regenName is the legend entry of the regeneration-round marks.
const regenName = "regeneration round"

// measured counts the points with a value.
func (s series) measured() int {
	n := 0
	for _, p := range s.points {
		if !math.IsNaN(p.y) {
			n++
		}
	}
	return n
}

// markerR is the radius of the series' markers.
func (s series) markerR() float64 {
	if s.width == strokeMain {
		return 2.8
	}
	return 2.2
}

// marked reports whether svg draws markers for s: a main series does, any
// series with a lone point does at that point.
func (s series) marked() bool {
	if s.width == strokeMain && s.measured() <= maxMarkers {
		return s.measured() > 0
	}
	for _, run := range splitNaN(s.points) {
		if len(run) == 1 {
			return true
		}
	}
	return false
}

// lined reports whether svg draws a line for s (two adjacent points of one
// population).
func (s series) lined() bool {
	for _, run := range splitNaN(s.points) {
		if len(run) > 1 {
			return true
		}
	}
	return false
}

// legendEntry is one row item of a plot's legend.
type legendEntry struct {
	name, color  string
	dashed, box  bool
	line, marker bool // what the swatch shows: what the plot draws for it
	regen        bool
}

// legendRowH is the height of one legend row under the plot.
const legendRowH = 16

// legendLayout places the entries (series, band, regeneration marks) in
// rows under the x axis, wrapping at the plot width, so the legend never
// hides data. Only what the plot draws is listed: a series without a
// measured round, or a band without one, has no entry. It returns no
// entries when there is only one thing to tell apart.
func (c chart) legendLayout() (es []legendEntry, xs, rows []int) {
	for _, s := range c.series {
		if s.measured() == 0 {
			continue
		}
		es = append(es, legendEntry{name: s.name, color: s.color, dashed: s.dashed, line: s.lined(), marker: s.marked()})
	}
	if c.band != nil && len(segments(c.band.lo, c.band.hi)) > 0 {
		es = append(es, legendEntry{name: c.band.name, color: c.band.color, box: true})
	}
	if _, ys := c.extent(); len(c.axis.regen) > 0 && len(ys) > 0 {
		es = append(es, legendEntry{name: regenName, color: regenColor, regen: true})
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
		fmt.Fprintf(b, `<g class="entry" data-legend="%s">`, esc(e.name))
		switch {
		case e.box:
			fmt.Fprintf(b, `<rect class="swatch" x="%d" y="%d" width="%d" height="9" fill="%s" fill-opacity="%s" stroke="%s" stroke-opacity="%s"/>`,
				x, cy-4, legendSwatchW, e.color, num(bandOpacity), e.color, num(bandEdgeOpacity))
		case e.regen:
			fmt.Fprintf(b, `<line class="swatch" x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="1" stroke-dasharray="3 3"/>`,
				x+legendSwatchW/2, cy-6, x+legendSwatchW/2, cy+6, e.color)
		default:
			if e.line {
				dash := ""
				if e.dashed {
					dash = ` stroke-dasharray="4 2"`
				}
				fmt.Fprintf(b, `<line class="swatch" x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="2.5"%s/>`, x, cy, x+legendSwatchW, cy, e.color, dash)
			}
			if e.marker {
				fmt.Fprintf(b, `<circle class="swatch" cx="%d" cy="%d" r="3" fill="%s"/>`, x+legendSwatchW/2, cy, e.color)
			}
		}
		fmt.Fprintf(b, `<text x="%d" y="%d" font-size="%d" fill="#222">%s</text>`, x+legendSwatchW+6, cy+4, smallFontSize, esc(e.name))
		b.WriteString(`</g>`)
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

// segments returns the runs of adjacent rounds of one population where
// both band edges are measured, so a band never bridges a round without
// data; a run of one round is a lone round (a bar).
func segments(lo, hi []point) []bandSeg {
	var out []bandSeg
	start := -1
	for i := 0; i <= len(lo); i++ {
		ok := i < len(lo) && !math.IsNaN(lo[i].y) && !math.IsNaN(hi[i].y)
		if ok && start >= 0 && lo[i].pop != lo[start].pop {
			out = append(out, bandSeg{lo[start:i], hi[start:i]})
			start = -1
		}
		if ok && start < 0 {
			start = i
		}
		if !ok && start >= 0 {
			out = append(out, bandSeg{lo[start:i], hi[start:i]})
			start = -1
		}
	}
	return out
}

// splitNaN returns the runs of consecutive measured points of one
// population.
func splitNaN(ps []point) [][]point {
	var out [][]point
	var cur []point
	for _, p := range ps {
		if len(cur) > 0 && p.pop != cur[0].pop {
			out = append(out, cur)
			cur = nil
		}
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
