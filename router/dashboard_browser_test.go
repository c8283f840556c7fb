package router

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"frontdoor/balancer"
	sim "frontdoor/internal/gpusim"
	"frontdoor/internal/testenv"
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

// The dashboard in a real browser, under traffic that has run a while:
// on first load, before the page fetches anything, every chart is drawn
// from the history the gateway kept, with axes, ticks and units, and the
// tenants' rows are there; remotely, on the main listener, it opens after
// the login form (no header), and the page logs no error. A screenshot is
// taken (FRONTDOOR_DASHBOARD_PNG=docs/img/dashboard.png to refresh the
// README's). Pages of another origin can act neither through the admin
// listener nor through the session.
func TestDashboardInBrowser(t *testing.T) {
	exe := chromium(t)
	t.Setenv("FRONTDOOR_ADMIN_TOKEN", testToken)
	flaky := testenv.GPUSim(t, func(c *sim.Config) {
		c.TTFT, c.ITL, c.OutputTokens, c.FailRate = 40*time.Millisecond, 2*time.Millisecond, 16, 0.5
	})
	// A judge on a node of its own, which knows half the background's
	// rewordings (yes) and no other pair (unsure).
	var labels strings.Builder
	for i := 0; i < 5000; i += 2 {
		q := fmt.Sprintf("What is the capital of country number %d?", i)
		fmt.Fprintf(&labels, "%s\t%s\t1\n", q, strings.ToLower(strings.TrimSuffix(q, "?")))
	}
	known, err := sim.ReadJudgeLabels(strings.NewReader(labels.String()))
	if err != nil {
		t.Fatal(err)
	}
	judge := testenv.GPUSim(t, func(c *sim.Config) { c.Models, c.JudgeLabels = []string{"judge"}, known })
	// As an operator opens it: on the admin listener, with nothing else
	// under admin: (the main listener's /dashboard needs the token or a
	// session).
	gw := opsGateway(t, func(c *Config) {
		c.Balancer.Policy = "least_inflight"
		c.Balancer.HealthInterval = 200e6 // the probe brings the flaky node back after its failures
		c.Admin = DefaultConfig().Admin
		c.Nodes = append(c.Nodes, balancer.NodeConfig{Name: "gpu-flaky", URL: flaky.URL(), Kind: "vllm",
			Models: []string{"qwen3-8b"}, MaxConcurrency: 2, Weight: 1},
			balancer.NodeConfig{Name: "gpu-judge", URL: judge.URL(), Kind: "vllm", Models: []string{"judge"}, MaxConcurrency: 4, Weight: 1})
		v := &c.Cache.Semantic.Verify
		v.JudgeModel, v.AuditRate, v.MaxJudgeRPS = "judge", 1, 100
		c.Spillover.Price = SpillPrice{InputPerMillion: 2000, OutputPerMillion: 6000, Currency: "CNY"}
	})
	admin := serveAdmin(t, gw)
	tctx, stopTraffic := context.WithCancel(context.Background())
	wg := background(tctx, gw)
	defer wg.Wait()
	defer stopTraffic()

	// The history holds the traffic before the page is first opened.
	deadline := time.Now().Add(60 * time.Second)
	for {
		code, b := adminDo(t, http.MethodGet, gw.URL+"/admin/dashboard/history", "", "Authorization", "Bearer "+testToken)
		var h history
		if code == 200 && json.Unmarshal(b, &h) == nil && len(h.T) >= 2 && h.max("hit_rps") > 0 && h.max("spilled_rps") > 0 &&
			h.max("rejected_rps") > 0 && h.max("retries") > 0 && h.max("gpu_seconds_saved") > 0 && h.max("spill_cost") > 0 &&
			(operator{gw.Gateway}).Status().Cache.Verify.Unsure > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the history never filled: %d %s", code, b)
		}
		time.Sleep(time.Second)
	}

	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(exe), chromedp.NoSandbox,
		chromedp.Flag("headless", true), chromedp.WindowSize(1400, 1000), chromedp.Flag("disable-dev-shm-usage", true))
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancelAlloc()
	bctx, cancelBrowser := chromedp.NewContext(actx)
	defer cancelBrowser()
	ctx, cancel := context.WithTimeout(bctx, 120*time.Second)
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

	// What the page drew from the history it came with (fd.first, set
	// before its first fetch), and the axes and tables in the DOM.
	type firstLoad struct {
		Path    string
		Points  int
		Charts  map[string]map[string]float64
		Axes    map[string][3]int // y ticks, x ticks, unit length
		Tenants []string
		Err     string
	}
	const probe = `(() => ({Path: location.pathname, Points: fd.first.points, Charts: fd.first.charts,
	  Axes: Object.fromEntries([...document.querySelectorAll("svg[data-chart]")].map(s => [s.dataset.chart,
	    [s.querySelectorAll(".y-tick").length, s.querySelectorAll(".x-tick").length, (s.querySelector(".y-title")?.textContent || "").length]])),
	  Tenants: [...document.querySelectorAll("#tenants tr")].map(r => [...r.cells].map(c => c.textContent).join("|")),
	  Err: document.getElementById("err").textContent}))()`
	check := func(where string) firstLoad {
		t.Helper()
		f, err := chromedp.Run(ctx, chromedp.Evaluate[firstLoad](probe))
		if err != nil {
			t.Fatalf("%s: evaluate: %v", where, err)
		}
		c := f.Charts
		if f.Path != "/dashboard" || f.Points < 2 || c["rps"]["hit"] <= 0 || c["rps"]["local"] <= 0 || c["rps"]["spilled"] <= 0 ||
			c["rps"]["rejected"] <= 0 || c["hit"]["exact"] <= 0 || c["hit"]["semantic"] <= 0 || c["errors"]["retried"] <= 0 ||
			c["errors"]["node failures"] <= 0 || c["latency"]["request p99"] <= 0 || c["latency"]["TTFT p50"] <= 0 || c["saved"]["tokens/s"] <= 0 ||
			c["gpu"]["GPU-s"] <= 0 || c["spill"]["spilled"] <= 0 || c["cost"]["cost"] <= 0 {
			t.Fatalf("%s: the first load's charts are not all populated: %+v", where, f)
		}
		if _, ok := c["errors"]["5xx"]; !ok {
			t.Fatalf("%s: no 5xx series: %+v", where, c["errors"])
		}
		for _, id := range []string{"rps", "hit", "errors", "latency", "saved", "gpu", "spill", "load", "cost"} {
			if a := f.Axes[id]; a[0] < 2 || a[1] < 2 || a[2] == 0 {
				t.Fatalf("%s: chart %s has no axes (y ticks, x ticks, unit): %v", where, id, a)
			}
		}
		var def, limited bool
		for _, r := range f.Tenants {
			def = def || strings.HasPrefix(r, DefaultTenant+"|")
			limited = limited || strings.HasPrefix(r, "limited|")
		}
		if !def || !limited {
			t.Fatalf("%s: tenant rows: %q", where, f.Tenants)
		}
		return f
	}

	// 1. The admin listener: no credentials needed there.
	if err := chromedp.Do(ctx, chromedp.Navigate(admin+"/dashboard?every=500")); err != nil {
		t.Fatalf("load /dashboard: %v", err)
	}
	first := check("admin listener")

	// 2. Remotely, on the main listener: the dashboard sends the browser to
	// the login form; the token typed there opens it.
	if err := chromedp.Do(ctx, chromedp.Navigate(gw.URL+"/dashboard?every=500"), chromedp.WaitVisible("#token"),
		chromedp.SendKeys("#token", testToken), chromedp.Submit("#token"), chromedp.WaitVisible("svg[data-chart=errors]")); err != nil {
		t.Fatalf("log in: %v", err)
	}
	check("main listener after login")
	// The page keeps fetching with the cookie: ticks, and no error shown.
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](`fd.ticks >= 4 && document.getElementById("err").textContent === "" && document.querySelectorAll("#nodes tr").length === 4`)); err != nil {
		t.Fatalf("the dashboard does not refresh after login: %v", err)
	}
	checkReadsTrue(ctx, t, gw)
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
	t.Logf("screenshot: %s (%d bytes); first load: %d points, %+v", out, len(png), first.Points, first.Charts)
	mu.Lock()
	if len(pageErrors) > 0 {
		t.Fatalf("the page logged errors:\n%s", strings.Join(pageErrors, "\n"))
	}
	mu.Unlock()

	// 3. A page of another origin (another port: same site, as a web app
	// on the operator's machine, so the SameSite=Strict session cookie goes
	// with its requests) posts to the admin listener and to the main
	// listener with simple, no-cors requests, which no preflight stops:
	// both refuse them.
	var attempts atomic.Int32
	evil := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		attempts.Add(1)
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprintf(w, `<script>Promise.allSettled([%q, %q].map(u => fetch(u, {method: "POST", mode: "no-cors", credentials: "include", body: "a forged prompt"}))).finally(() => document.title = "sent")</script>`,
			admin+"/admin/cache/warm?name=forged.txt&model=qwen3-8b", gw.URL+"/admin/cache/warm?name=forged-session.txt&model=qwen3-8b")
	}))
	defer evil.Close()
	if err := chromedp.Do(ctx, chromedp.Navigate(evil.URL)); err != nil {
		t.Fatalf("load the cross-origin page: %v", err)
	}
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](`document.title === "sent"`)); err != nil || attempts.Load() == 0 {
		t.Fatalf("the cross-origin page did not run (%v, %d loads)", err, attempts.Load())
	}
	for _, j := range (operator{gw.Gateway}).Status().Warm {
		if strings.Contains(j.Source, "forged") {
			t.Fatalf("a cross-origin page started a warm-up: %+v", j)
		}
	}
	cancel()
	<-consoleDone
}

// checkReadsTrue checks that the dashboard reads true at a glance (issue
// 49): the tables are in view without scrolling at 1400×1000; each legend
// holds its chart's value over the window, labelled so, not its last step;
// the audits the judge could not decide are counted and shown; the
// GPU-time tile is the tenants' rows added up; and the judge's own model,
// on a node of its own, is not offered to clients in /v1/models.
func checkReadsTrue(ctx context.Context, t *testing.T, gw *testGateway) {
	t.Helper()
	type glance struct {
		Height       float64
		Tables       [2]float64 // bottom of the tenants' and the nodes' table
		Legend, Mean float64    // the rps chart's "hit" legend, and the mean of what it draws
		LegendNote   string
		GPUTotal     float64 // the gpu chart's legend: its cumulative total
		Judged       string
		Tile         string
		RowsGPU      float64
		Rows         int
	}
	const probe = `(() => {
	  const hit = fd.charts.rps.hit.filter(v => v != null);
	  return {Height: innerHeight,
	    Tables: [...document.querySelectorAll(".tables table")].map(t => t.getBoundingClientRect().bottom),
	    Legend: fd.legends.rps.hit, Mean: hit.reduce((a, b) => a + b, 0) / hit.length,
	    LegendNote: document.querySelector("#l-rps .lw").textContent,
	    GPUTotal: fd.legends.gpu["GPU-s"],
	    Judged: document.getElementById("falsehitci").textContent,
	    Tile: document.getElementById("gpusaved").textContent,
	    RowsGPU: [...document.querySelectorAll("#tenants tr")].reduce((a, r) => a + Number(r.cells[4].textContent), 0),
	    Rows: document.querySelectorAll("#tenants tr").length};
	})()`
	g, err := chromedp.Run(ctx, chromedp.Evaluate[glance](probe))
	if err != nil {
		t.Fatalf("evaluate: %v", err)
	}
	if g.Tables[0] <= 0 || g.Tables[0] > g.Height || g.Tables[1] > g.Height {
		t.Errorf("at 1400×1000 the tables end at %v, below the window's %v px", g.Tables, g.Height)
	}
	if g.Legend <= 0 || g.Legend < g.Mean*0.999 || g.Legend > g.Mean*1.001 || !strings.HasPrefix(g.LegendNote, "average over the last ") {
		t.Errorf("the hit legend reads %v (%q), the window's average is %v", g.Legend, g.LegendNote, g.Mean)
	}
	if g.GPUTotal <= 0 {
		t.Errorf("the GPU chart's legend total is %v", g.GPUTotal)
	}
	if !strings.Contains(g.Judged, " unsure (in no rate)") || strings.HasPrefix(g.Judged, "none judged yet") {
		t.Errorf("the judged-wrong tile hides the unsure audits: %q", g.Judged)
	}
	tile, err := strconv.ParseFloat(strings.TrimSuffix(g.Tile, " GPU-s"), 64)
	if err != nil || tile <= 0 || math.Abs(tile-g.RowsGPU) > 0.05*float64(g.Rows+1) { // each shown to 0.1

		t.Errorf("the GPU-time tile %q is not the tenants' rows added up (%.1f)", g.Tile, g.RowsGPU)
	}
	var models struct{ Data []struct{ ID string } }
	_, body := adminDo(t, http.MethodGet, gw.URL+"/v1/models", "")
	if err := json.Unmarshal(body, &models); err != nil || len(models.Data) == 0 {
		t.Fatalf("/v1/models: %v %s", err, body)
	}
	for _, m := range models.Data {
		if m.ID == "judge" {
			t.Errorf("/v1/models offers the judge's own model to clients: %s", body)
		}
	}
}
