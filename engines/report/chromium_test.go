package report

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"html"
	"image"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spade-pipeline/spade/docs"
)

var screenshotOut = flag.String("screenshot", "", "also write the Chromium screenshot of the sample report to this PNG path")

// chromium returns the headless browser the rendering test drives; the
// report must open in a real browser, so its absence fails the test.
func chromium(t *testing.T) string {
	t.Helper()
	for _, p := range []string{"/usr/bin/chromium", "chromium", "chromium-browser"} {
		if path, err := exec.LookPath(p); err == nil {
			return path
		}
	}
	t.Fatal("chromium not found: install the Debian package `chromium` (apt-get install chromium); CI installs it")
	return ""
}

// runChromium runs headless Chromium on the file URL with extra flags and
// returns stdout. No network: the flags switch off every background
// fetch, and the page itself loads nothing.
func runChromium(t *testing.T, bin, url string, extra ...string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	args := []string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--disable-dev-shm-usage", "--hide-scrollbars", "--user-data-dir=" + t.TempDir()}
	args = append(args, extra...)
	args = append(args, url)
	cmd := exec.CommandContext(ctx, bin, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("chromium %s: %v\nstderr:\n%s", strings.Join(extra, " "), err, stderr.String())
	}
	return stdout.Bytes()
}

// pageWidth is the browser window the report must fit: a laptop screen.
const pageWidth = 1400

// measureScript runs in Chromium over a copy of the report (its CSP
// allowing this one inline script) and writes what the layout engine
// computed into <pre id="measure"> as JSON, which --dump-dom returns: the
// document's width, each plot's box, each legend entry's swatch and label
// and how many elements the plot draws under that entry's name (inside
// the plot, with a size), every bar and band, each table's box and every
// in-page link's target.
const measureScript = `<script>
(() => {
  const box = e => { const r = e.getBoundingClientRect(); return {l: r.left, r: r.right, t: r.top, b: r.bottom, w: r.width, h: r.height}; };
  const out = {doc: document.documentElement.scrollWidth, plots: [], tables: [], links: [], header: {}};
  for (const svg of document.querySelectorAll("svg.plot")) {
    const s = box(svg);
    const p = {id: svg.id, box: s, legend: [], bars: [], bands: []};
    const inside = b => b.l >= s.l - 0.5 && b.r <= s.r + 0.5 && b.t >= s.t - 0.5 && b.b <= s.b + 0.5;
    const drawn = [...svg.querySelectorAll("[data-series]")].filter(e => !e.closest("g.legend"));
    for (const e of svg.querySelectorAll("g.legend g.entry")) {
      const name = e.dataset.legend;
      const sw = [...e.querySelectorAll(".swatch")].map(box);
      const text = box(e.querySelector("text"));
      const mine = drawn.filter(d => d.dataset.series === name).map(box).filter(b => (b.w > 0 || b.h > 0) && inside(b));
      const markers = drawn.filter(d => d.dataset.series === name && d.classList.contains("marker")).map(box).filter(b => b.w > 0 && inside(b));
      p.legend.push({name, swatches: sw.length, swatchArea: sw.reduce((a, b) => a + Math.max(b.w, 1) * Math.max(b.h, 1), 0),
        visible: sw.every(inside) && inside(text) && text.w > 0, drawn: mine.length, markers: markers.length});
    }
    p.noData = [...svg.querySelectorAll(".no-data")].map(e => e.textContent);
    p.group = svg.closest("section.plots").id;
    p.bars = [...svg.querySelectorAll(".bar")].map(e => box(e).h);
    p.bands = [...svg.querySelectorAll(".band")].map(e => box(e).w * box(e).h);
    out.plots.push(p);
  }
  for (const t of document.querySelectorAll("table")) out.tables.push({id: t.id, box: box(t)});
  for (const a of document.querySelectorAll("a[href]")) {
    const h = a.getAttribute("href");
    out.links.push({href: h, ok: h.startsWith("#") && document.getElementById(h.slice(1)) !== null});
  }
  for (const id of ["hdr-model", "hdr-trainer", "hdr-serving", "hdr-recipe", "hdr-digest"]) {
    const e = document.getElementById(id);
    out.header[id] = e ? e.textContent : null;
  }
  const pre = document.createElement("pre");
  pre.id = "measure";
  pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
})();
</script>`

// layout is what measureScript reports.
type layout struct {
	Doc   float64 `json:"doc"`
	Plots []struct {
		ID     string `json:"id"`
		Box    rect   `json:"box"`
		Legend []struct {
			Name       string  `json:"name"`
			Swatches   int     `json:"swatches"`
			SwatchArea float64 `json:"swatchArea"`
			Visible    bool    `json:"visible"`
			Drawn      int     `json:"drawn"`
			Markers    int     `json:"markers"`
		} `json:"legend"`
		Bars   []float64 `json:"bars"`
		Bands  []float64 `json:"bands"`
		NoData []string  `json:"noData"`
		Group  string    `json:"group"`
	} `json:"plots"`
	Tables []struct {
		ID  string `json:"id"`
		Box rect   `json:"box"`
	} `json:"tables"`
	Links []struct {
		Href string `json:"href"`
		OK   bool   `json:"ok"`
	} `json:"links"`
	Header map[string]*string `json:"header"`
}

type rect struct {
	L float64 `json:"l"`
	R float64 `json:"r"`
	T float64 `json:"t"`
	B float64 `json:"b"`
	W float64 `json:"w"`
	H float64 `json:"h"`
}

// chromiumRounds is a 12-round run with k = 4 as the metrics stage writes
// it (validity, diversity and regret on rounds 0, 4 and 8 only), plus a
// skill played in one round only, which used to get a legend entry and
// nothing drawn, and held-out scores of rounds 3, 7 and 11. Its training
// summaries (sampleTraining) have a log-prob mismatch from round 6 on
// only, its replies token lengths from round 6 on, on_policy from round 2.
func chromiumRounds() []RoundSummary {
	rounds := sampleRounds(12)
	rounds[6].PerSkillWinRate["one-round-skill"] = 0.4
	for _, i := range []int{3, 7, 11} {
		rounds[i].Evals = map[string]float64{"reasoning_gym/leg_counting accuracy": 0.1 + 0.05*float64(i)}
	}
	return rounds
}

// chromiumHeight is the browser window's height: every plot and table of
// the 12-round page fits in it, so the screenshot shows them all.
const chromiumHeight = 6400

// TestRenderInChromium opens the report, with the real docs/metrics.md
// rendered at its end, in Debian's headless Chromium at 1,400 px: the DOM
// with the layout the browser computed, checked element by element, and
// a screenshot (kept as a test artefact: go test -artifacts -outputdir
// DIR keeps it under DIR). In the DOM: every plot and table fits the
// window; every legend entry has a visible swatch and label and at least
// one element of its name drawn inside its plot; each regeneration round
// of the regret plot has a p10–p90 bar with height; win rate is drawn per
// population; the training-dynamics and reply plots draw a marker for
// each round with data and none for a round without (the log-prob
// mismatch and token lengths from round 6, on_policy from round 2); the
// header names model, trainer, serving mode, recipe and config digest;
// every link has its target in the page. In the screenshot, the region of
// each training-dynamics and reply plot is drawn (many colours, ink).
func TestRenderInChromium(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a browser")
	}
	bin := chromium(t)
	dir := t.TempDir()
	h := testHeader("chromium-run")
	h.MetricsDoc = docs.Metrics
	page := renderWith(t, h, chromiumRounds())
	htmlPath := filepath.Join(dir, "report.html")
	if err := os.WriteFile(htmlPath, page, 0o644); err != nil {
		t.Fatal(err)
	}
	window := fmt.Sprintf("--window-size=%d,%d", pageWidth, chromiumHeight)

	var l layout
	t.Run("dom", func(t *testing.T) { l = chromiumDOM(t, bin, dir, page, window) })

	t.Run("screenshot", func(t *testing.T) { chromiumScreenshot(t, bin, htmlPath, window, l) })
}

// chromiumScreenshot is TestRenderInChromium's subtest "screenshot"; l is
// the layout the subtest "dom" measured in the same window (no plots
// when it failed).
func chromiumScreenshot(t *testing.T, bin string, htmlPath string, window string, l layout) {
	shot := filepath.Join(t.ArtifactDir(), "report-1400.png")
	runChromium(t, bin, "file://"+htmlPath, "--screenshot="+shot, window)
	f, err := os.Open(shot)
	if err != nil {
		t.Fatalf("no screenshot: %v", err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("decode screenshot: %v", err)
	}
	if b := img.Bounds(); b.Dx() != pageWidth || b.Dy() != chromiumHeight {
		t.Fatalf("screenshot is %v, want %dx%d", b, pageWidth, chromiumHeight)
	}
	colours, inked := pixelStats(img)
	// Five plots in many colours plus anti-aliasing give hundreds of
	// colours; a blank or error page gives a handful.
	if colours < 50 {
		t.Fatalf("screenshot has %d distinct colours: blank or broken page", colours)
	}
	if inked < 0.02 {
		t.Fatalf("only %.1f%% of the screenshot is non-white", 100*inked)
	}
	t.Logf("screenshot %s: %d colours, %.1f%% non-white", shot, colours, 100*inked)
	// Each plot of the reply and training groups, cut out of the
	// screenshot where the browser laid it out: lines and markers in
	// several colours, not an empty frame.
	checked := 0
	for _, p := range l.Plots {
		if p.Group != "group-training" && p.Group != "group-replies" {
			continue
		}
		checked++
		r := image.Rect(int(p.Box.L), int(p.Box.T), int(p.Box.R), int(p.Box.B))
		if !r.In(img.Bounds()) {
			t.Errorf("plot %s at %v is outside the %v screenshot", p.ID, r, img.Bounds())
			continue
		}
		sub := img.(interface {
			SubImage(image.Rectangle) image.Image
		}).SubImage(r)
		if c, ink := pixelStats(sub); c < 20 || ink < 0.05 {
			t.Errorf("plot %s in the screenshot: %d colours, %.1f%% non-white: not drawn", p.ID, c, 100*ink)
		}
	}
	if checked != 11 {
		t.Errorf("%d reply and training plots cut from the screenshot, want 11", checked)
	}
	if *screenshotOut != "" {
		data, err := os.ReadFile(shot)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(*screenshotOut, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// chromiumDOM is TestRenderInChromium's subtest "dom"; it returns the
// layout measured.
func chromiumDOM(t *testing.T, bin string, dir string, page []byte, window string) layout {
	// The page's policy forbids scripts; the measuring copy allows
	// the one inline script it adds, and nothing else.
	csp := `content="default-src 'none'; style-src 'unsafe-inline'"`
	if !bytes.Contains(page, []byte(csp)) {
		t.Fatalf("report lacks its Content-Security-Policy %s", csp)
	}
	measured := bytes.Replace(page, []byte(csp), []byte(`content="default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'"`), 1)
	measured = bytes.Replace(measured, []byte("</body>"), []byte(measureScript+"</body>"), 1)
	mPath := filepath.Join(dir, "measure.html")
	if err := os.WriteFile(mPath, measured, 0o644); err != nil {
		t.Fatal(err)
	}
	dom := string(runChromium(t, bin, "file://"+mPath, "--dump-dom", window))
	if got := strings.Count(dom, "<svg "); got != PlotCount+1 {
		t.Fatalf("DOM has %d <svg> elements, want %d (with the held-out scores)", got, PlotCount+1)
	}
	start := strings.Index(dom, `<pre id="measure">`)
	if start < 0 {
		t.Fatalf("the measuring script did not run; DOM:\n%s", dom)
	}
	raw := dom[start+len(`<pre id="measure">`):]
	raw = html.UnescapeString(raw[:strings.Index(raw, "</pre>")])
	var l layout
	if err := json.Unmarshal([]byte(raw), &l); err != nil {
		t.Fatalf("measurements: %v\n%s", err, raw)
	}
	if l.Doc > pageWidth {
		t.Errorf("the page is %.0f px wide, over the %d px window", l.Doc, pageWidth)
	}
	var ids []string
	for _, tb := range l.Tables {
		if tb.Box.R > pageWidth || tb.Box.W == 0 {
			t.Errorf("table %q spans %.0f to %.0f px, outside the %d px window", tb.ID, tb.Box.L, tb.Box.R, pageWidth)
		}
		if tb.ID != "" {
			ids = append(ids, tb.ID)
		}
	}
	if want := []string{"rounds", "skills", "replies", "training", "evals"}; !slices.Equal(ids, want) {
		t.Errorf("tables %q, want %q (and the definitions' own)", ids, want)
	}
	if len(l.Tables) <= len(ids) {
		t.Error("the definitions (docs/metrics.md) render no table: still raw Markdown?")
	}
	chromiumPlots(t, l)
	for id, v := range l.Header {
		if v == nil || strings.TrimSpace(*v) == "" {
			t.Errorf("header %s missing or empty", id)
		}
	}
	if v := l.Header["hdr-serving"]; v != nil && *v != "not in this run's config" {
		t.Errorf("serving mode %q, want the placeholder for a config without one", *v)
	}
	if len(l.Links) == 0 {
		t.Error("the page links nothing: its doc references should be links")
	}
	for _, a := range l.Links {
		if !a.OK {
			t.Errorf("link %q has no target in the page (the report is read offline)", a.Href)
		}
	}
	return l
}

// chromiumLegends are the legend entries each plot of chromiumRounds'
// page must list, in order.
var chromiumLegends = map[string][]string{
	"learnable": {"learnable, designed envs (regeneration rounds)", "learnable, pool (other rounds)", regenName},
	"winrate": {"all skills, designed envs (regeneration rounds)", "all skills, pool (other rounds)",
		"causal-inference", "logical-deduction", "one-round-skill", "planning", "spatial-reasoning", regenName},
	"regret":         {"mean", "median", "p10–p90", regenName},
	"diversity":      {"Vendi/n", regenName},
	"validity":       {"validity", regenName},
	"heldout":        {"reasoning_gym/leg_counting accuracy", regenName},
	"reply-chars":    {"mean", "p90", regenName},
	"reply-tokens":   {"mean", "p90", regenName},
	"cut":            {"replies cut (finish_reason length)", "plays ended agent_cut", "stepped replies without an action", regenName},
	"on-policy":      {"on_policy", regenName},
	"loss":           {"loss", regenName},
	"grad-norm":      {"grad_norm", regenName},
	"clip":           {"clip_fraction (mean over inner steps)", "tis_clip_fraction (tokens with a sampler log-prob)", regenName},
	"kl":             {"kl", regenName},
	"trained-tokens": {"trained_tokens", regenName},
	"mismatch":       {"mean", "max", regenName},
	"zero-variance":  {"zero_variance_groups / agent_groups", regenName},
}

// chromiumMarkers is how many markers the browser must show for a series
// ("plot/legend entry") of chromiumRounds' page: one per round with data.
var chromiumMarkers = map[string]int{
	"loss/loss": 12, "grad-norm/grad_norm": 12, "kl/kl": 12, "trained-tokens/trained_tokens": 12,
	"clip/clip_fraction (mean over inner steps)": 12, "clip/tis_clip_fraction (tokens with a sampler log-prob)": 6,
	"mismatch/mean": 6, "mismatch/max": 6, "zero-variance/zero_variance_groups / agent_groups": 12,
	"reply-chars/mean": 12, "reply-tokens/mean": 6, "reply-tokens/p90": 6, "on-policy/on_policy": 10,
	"cut/stepped replies without an action": 12, "heldout/reasoning_gym/leg_counting accuracy": 3,
}

// chromiumPlots checks every plot of l (chromiumDOM).
func chromiumPlots(t *testing.T, l layout) {
	if len(l.Plots) != PlotCount+1 {
		t.Fatalf("%d plots measured, want %d", len(l.Plots), PlotCount+1)
	}
	markers := 0
	for _, p := range l.Plots {
		if p.Box.R > pageWidth || p.Box.W == 0 || p.Box.B > chromiumHeight {
			t.Errorf("plot %s spans %.0f to %.0f px, bottom %.0f, outside the window", p.ID, p.Box.L, p.Box.R, p.Box.B)
		}
		if len(p.NoData) > 0 {
			t.Errorf("plot %s says %q, but every plot has data", p.ID, p.NoData)
		}
		var names []string
		for _, e := range p.Legend {
			names = append(names, e.Name)
			if !e.Visible || e.Swatches == 0 || e.SwatchArea < 9 {
				t.Errorf("plot %s: legend entry %q is not visible (swatches %d, area %.0f)", p.ID, e.Name, e.Swatches, e.SwatchArea)
			}
			if e.Drawn == 0 {
				t.Errorf("plot %s: legend entry %q has nothing drawn in the plot", p.ID, e.Name)
			}
			if want, ok := chromiumMarkers[p.ID+"/"+e.Name]; ok {
				markers++
				if e.Markers != want {
					t.Errorf("plot %s: %q has %d markers in the browser, want %d (one per round with data)", p.ID, e.Name, e.Markers, want)
				}
			}
		}
		if !slices.Equal(names, chromiumLegends[p.ID]) {
			t.Errorf("plot %s legend = %q, want %q", p.ID, names, chromiumLegends[p.ID])
		}
		if p.ID == "regret" {
			// Regret on rounds 0, 4 and 8, none adjacent: a bar each,
			// from p10 to p90 (0.4 apart in sampleRounds), no band.
			if len(p.Bars) != 3 || len(p.Bands) != 0 {
				t.Errorf("regret: %d bars and %d bands, want 3 and 0", len(p.Bars), len(p.Bands))
			}
			for i, h := range p.Bars {
				if h < 20 {
					t.Errorf("regret bar %d is %.1f px high: p10–p90 not shown", i, h)
				}
			}
		}
	}
	if markers != len(chromiumMarkers) {
		t.Errorf("%d of the %d series with a marker count were measured", markers, len(chromiumMarkers))
	}
}

// pixelStats returns the number of distinct colours and the share of
// pixels that are not white.
func pixelStats(img image.Image) (int, float64) {
	seen := map[uint64]struct{}{}
	b := img.Bounds()
	inked := 0
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			r, g, bl, a := img.At(x, y).RGBA()
			seen[uint64(r)<<48|uint64(g)<<32|uint64(bl)<<16|uint64(a)] = struct{}{}
			if r < 0xf000 || g < 0xf000 || bl < 0xf000 {
				inked++
			}
		}
	}
	return len(seen), float64(inked) / float64(b.Dx()*b.Dy())
}
