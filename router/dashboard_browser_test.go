package router

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// chromium finds a headless-capable Chromium: FRONTDOOR_CHROMIUM, or
// Debian's chromium package (`make test` installs it).
func chromium(t *testing.T) string {
	t.Helper()
	for _, c := range []string{os.Getenv("FRONTDOOR_CHROMIUM"), "/usr/bin/chromium", "chromium", "chromium-browser", "google-chrome"} {
		if c == "" {
			continue
		}
		if p, err := exec.LookPath(c); err == nil {
			return p
		}
	}
	t.Skip("no chromium found: install Debian's chromium package (make test does) or set FRONTDOOR_CHROMIUM; the dashboard's browser test is skipped")
	return ""
}

// background sends the operator's traffic mix until ctx ends: misses and
// their exact and semantic hits, streamed bursts that fill the two local
// nodes and spill over, and a rate-limited tenant's rejected requests.
func background(ctx context.Context, gw *testGateway) *sync.WaitGroup {
	var wg sync.WaitGroup
	client := &http.Client{Timeout: 10 * time.Second}
	send := func(body string, headers ...string) {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, gw.URL+"/v1/chat/completions", strings.NewReader(body))
		if err != nil {
			return
		}
		req.Header.Set("Content-Type", "application/json")
		for i := 0; i+1 < len(headers); i += 2 {
			req.Header.Set(headers[i], headers[i+1])
		}
		if resp, err := client.Do(req); err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	}
	for w := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ctx.Err() == nil; i++ {
				switch w {
				case 0: // a miss, then an exact and a semantic hit
					q := fmt.Sprintf("What is the capital of country number %d?", i)
					send(cbody(q, ""))
					time.Sleep(20 * time.Millisecond)
					send(cbody(q, ""))
					send(cbody(strings.ToLower(strings.TrimSuffix(q, "?")), ""))
				case 5: // the limited tenant: mostly 429s
					send(cbody("limited", ""), "Authorization", "Bearer sk-limited")
					time.Sleep(100 * time.Millisecond)
				default: // streamed misses: 4 workers on 4 local slots, with the others' bursts some spill
					send(cbody(fmt.Sprintf("worker %d asks question %d", w, i), `"stream":true`))
				}
			}
		}()
	}
	return &wg
}

// The dashboard in a real browser, under traffic: every chart gets
// non-zero data, the page logs no error, and a screenshot is taken
// (FRONTDOOR_DASHBOARD_PNG=docs/img/dashboard.png to refresh the README's).
func TestDashboardInBrowser(t *testing.T) {
	exe := chromium(t)
	// As an operator opens it: on the admin listener, with nothing else
	// under admin: (the main listener's /dashboard needs the token).
	gw := opsGateway(t, func(c *Config) {
		c.Balancer.Policy = "least_inflight"
		c.Admin = DefaultConfig().Admin
	})
	admin := serveAdmin(t, gw)
	tctx, stopTraffic := context.WithCancel(context.Background())
	wg := background(tctx, gw)
	defer wg.Wait()
	defer stopTraffic()

	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(exe), chromedp.NoSandbox,
		chromedp.Flag("headless", true), chromedp.WindowSize(1400, 1150), chromedp.Flag("disable-dev-shm-usage", true))
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancelAlloc()
	bctx, cancelBrowser := chromedp.NewContext(actx)
	defer cancelBrowser()
	ctx, cancel := context.WithTimeout(bctx, 90*time.Second)
	defer cancel()

	// Subscribe before loading, so that no message is lost.
	var mu sync.Mutex
	var pageErrors []string
	messages := chromedp.Console(ctx)
	consoleDone := make(chan struct{})
	go func() {
		defer close(consoleDone)
		for m, err := range messages {
			if err != nil {
				return
			}
			if m.Type == chromedp.ConsoleError || m.IsException() {
				mu.Lock()
				pageErrors = append(pageErrors, m.String())
				mu.Unlock()
			}
		}
	}()
	if err := chromedp.Do(ctx, chromedp.Navigate(admin+"/dashboard?every=500")); err != nil {
		t.Fatalf("load /dashboard: %v", err)
	}

	// What each chart must have shown at least once: a non-zero sample.
	type seen struct {
		Ticks                                 int
		Exact, Semantic                       float64
		Hit, Local, Spilled, Rejected         float64
		P50, P95, Load, Saved                 float64
		SpillText, HitText, ErrText, NodeBars string
		FalseHitText                          string
	}
	const probe = `(() => {
	  const c = fd.charts, mx = a => Math.max(0, ...(a || []));
	  const load = Object.values(c.load || {}).map(mx);
	  return {Ticks: fd.ticks,
	    Exact: mx(c.hit?.exact), Semantic: mx(c.hit?.semantic),
	    Hit: mx(c.rps?.hit), Local: mx(c.rps?.local), Spilled: mx(c.rps?.spilled), Rejected: mx(c.rps?.rejected),
	    P50: mx(c.ttft?.p50), P95: mx(c.ttft?.p95), Load: Math.max(0, ...load), Saved: mx(c.saved?.["tokens/s"]),
	    SpillText: document.getElementById("spill").textContent, HitText: document.getElementById("hit").textContent,
	    ErrText: document.getElementById("err").textContent, FalseHitText: document.getElementById("falsehit").textContent,
	    NodeBars: [...document.querySelectorAll("#nodes tr")].length + " rows"};
	})()`
	var s seen
	deadline := time.Now().Add(45 * time.Second)
	for {
		var err error
		if s, err = chromedp.Run(ctx, chromedp.Evaluate[seen](probe)); err != nil {
			t.Fatalf("evaluate: %v", err)
		}
		if s.Exact > 0 && s.Semantic > 0 && s.Hit > 0 && s.Local > 0 && s.Spilled > 0 && s.Rejected > 0 &&
			s.P50 > 0 && s.P95 >= s.P50 && s.Load > 0 && s.Saved > 0 && s.Ticks >= 6 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the charts never all showed data: %+v", s)
		}
		time.Sleep(250 * time.Millisecond)
	}
	if s.ErrText != "" || s.SpillText == "–" || s.SpillText == "0.0%" || s.HitText == "0.0%" || s.NodeBars != "2 rows" || s.FalseHitText != "no judge" {
		t.Fatalf("page: %+v", s)
	}
	// The canvases were drawn: some pixels are not blank.
	painted, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`["hit","rps","ttft","load","saved"].every(id => {
	  const cv = document.getElementById("c-" + id), d = cv.getContext("2d").getImageData(0, 0, cv.width, cv.height).data;
	  for (let i = 3; i < d.length; i += 4) if (d[i] !== 0) return true;
	  return false;
	})`))
	if err != nil || !painted {
		t.Fatalf("some chart canvas is blank (err %v)", err)
	}
	if os.Getenv("FRONTDOOR_DASHBOARD_PNG") != "" {
		time.Sleep(20 * time.Second) // longer lines for the README's picture
	}
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100)) // 100: PNG
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	out := filepath.Join(t.TempDir(), "dashboard.png")
	if p := os.Getenv("FRONTDOOR_DASHBOARD_PNG"); p != "" {
		out = p
		if !filepath.IsAbs(p) {
			out = filepath.Join("..", p) // relative to the repository root
		}
	}
	if err := os.WriteFile(out, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s (%d bytes); charts: %+v", out, len(png), s)
	mu.Lock()
	if len(pageErrors) > 0 {
		t.Fatalf("the page logged errors:\n%s", strings.Join(pageErrors, "\n"))
	}
	mu.Unlock()

	// A page of another origin (another port: same site, as a web app on
	// the operator's machine) posts to the admin listener with a simple,
	// no-cors request, which no preflight stops: the listener refuses it.
	var attempts atomic.Int32
	evil := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		attempts.Add(1)
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprintf(w, `<script>fetch(%q, {method: "POST", mode: "no-cors", body: "a forged prompt"}).finally(() => document.title = "sent")</script>`,
			admin+"/admin/cache/warm?name=forged.txt&model=qwen3-8b")
	}))
	defer evil.Close()
	if err := chromedp.Do(ctx, chromedp.Navigate(evil.URL)); err != nil {
		t.Fatalf("load the cross-origin page: %v", err)
	}
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](`document.title === "sent"`)); err != nil || attempts.Load() == 0 {
		t.Fatalf("the cross-origin page did not run (%v, %d loads)", err, attempts.Load())
	}
	for _, j := range gw.status().Warm {
		if strings.Contains(j.Source, "forged") {
			t.Fatalf("a cross-origin page started a warm-up through the admin listener: %+v", j)
		}
	}
	cancel()
	<-consoleDone
}
