package report

import (
	"bytes"
	"context"
	"flag"
	"image"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
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

func TestRenderInChromium(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a browser")
	}
	bin := chromium(t)
	dir := t.TempDir()
	htmlPath := filepath.Join(dir, "report.html")
	if err := os.WriteFile(htmlPath, render(t, "chromium-run", sampleRounds(40)), 0o644); err != nil {
		t.Fatal(err)
	}
	url := "file://" + htmlPath

	t.Run("screenshot", func(t *testing.T) {
		shot := filepath.Join(dir, "shot.png")
		runChromium(t, bin, url, "--screenshot="+shot, "--window-size=1200,1600")
		f, err := os.Open(shot)
		if err != nil {
			t.Fatalf("no screenshot: %v", err)
		}
		defer f.Close()
		img, err := png.Decode(f)
		if err != nil {
			t.Fatalf("decode screenshot: %v", err)
		}
		if b := img.Bounds(); b.Dx() != 1200 || b.Dy() != 1600 {
			t.Fatalf("screenshot is %v, want 1200x1600", b)
		}
		colours, inked := pixelStats(img)
		// Five plots in five colours plus anti-aliasing give hundreds of
		// colours; a blank or error page gives a handful.
		if colours < 50 {
			t.Fatalf("screenshot has %d distinct colours: blank or broken page", colours)
		}
		if inked < 0.02 {
			t.Fatalf("only %.1f%% of the screenshot is non-white", 100*inked)
		}
		t.Logf("screenshot: %d colours, %.1f%% non-white", colours, 100*inked)
		if *screenshotOut != "" {
			data, err := os.ReadFile(shot)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(*screenshotOut, data, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	})

	t.Run("dom", func(t *testing.T) {
		dom := string(runChromium(t, bin, url, "--dump-dom"))
		if got := strings.Count(dom, "<svg "); got != PlotCount {
			t.Fatalf("DOM has %d <svg> elements, want %d", got, PlotCount)
		}
		for _, title := range []string{TitleLearnable, TitleWinRate, TitleRegret, TitleDiversity, TitleValidity, "chromium-run"} {
			if !strings.Contains(dom, title) {
				t.Errorf("DOM lacks %q", title)
			}
		}
		if got := strings.Count(dom, "<polygon"); got != 1 {
			t.Errorf("DOM has %d band polygons, want 1", got)
		}
	})
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
