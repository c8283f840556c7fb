package balancer

import (
	"context"
	"log/slog"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"frontdoor/internal/testenv"
)

func TestParseMetricsFixtures(t *testing.T) {
	nan := math.NaN()
	for _, tc := range []struct {
		file, kind           string
		waiting, running, kv float64
	}{
		{"vllm_v1.txt", "vllm", 3, 12, 0.4375},
		// Two data-parallel engines: queues add up, memory is the fuller one.
		{"vllm_v1_dp2.txt", "vllm", 5, 122, 0.953},
		// Before 0.9 the KV gauge was gpu_cache_usage_perc.
		{"vllm_legacy.txt", "vllm", 0, 7, 0.2113},
		// TGI: memory is batch tokens over the token budget, 100352/114688.
		{"tgi.txt", "tgi", 6, 32, 0.875},
		// No tgi_batch_max_total_tokens: memory is unknown, not idle.
		{"tgi_no_total.txt", "tgi", 0, 3, nan},
		// SGLang repeats the scheduler's view once per TP rank: not summed.
		{"sglang.txt", "sglang", 4, 21, 0.71},
		// The wrong kind finds nothing: all unknown.
		{"vllm_v1.txt", "sglang", nan, nan, nan},
		{"sglang.txt", "tgi", nan, nan, nan},
	} {
		t.Run(tc.file+"/"+tc.kind, func(t *testing.T) {
			m := parseMetrics(parseKind(tc.kind), fixture(t, tc.file))
			if !near(m.waiting, tc.waiting) || !near(m.running, tc.running) || !near(m.kv, tc.kv) {
				t.Fatalf("got waiting=%v running=%v kv=%v, want %v %v %v", m.waiting, m.running, m.kv, tc.waiting, tc.running, tc.kv)
			}
		})
	}
}

func TestParseMetricsEdgeCases(t *testing.T) {
	for _, tc := range []struct {
		name, body           string
		waiting, running, kv float64
	}{
		{"both KV names: the v1 name wins",
			"vllm:gpu_cache_usage_perc{model_name=\"m\"} 0.9\nvllm:kv_cache_usage_perc{engine=\"0\",model_name=\"m\"} 0.3\n",
			math.NaN(), math.NaN(), 0.3},
		{"trailing timestamp, CRLF, tabs",
			"vllm:num_requests_waiting{engine=\"0\"} 2 1759991012000\r\nvllm:num_requests_running\t5\r\n",
			2, 5, math.NaN()},
		{"escaped quotes and braces inside label values",
			`vllm:num_requests_waiting{model_name="we\"ird}{,name",engine="0"} 4` + "\n",
			4, math.NaN(), math.NaN()},
		{"NaN and Inf values are absent",
			"vllm:num_requests_waiting{engine=\"0\"} NaN\nvllm:num_requests_running{engine=\"0\"} +Inf\nvllm:kv_cache_usage_perc 0.5\n",
			math.NaN(), math.NaN(), 0.5},
		{"malformed lines are skipped",
			"vllm:num_requests_waiting{engine=\"0\" 3\nvllm:num_requests_waiting{engine=0} 3\nvllm:num_requests_waiting abc\nvllm:num_requests_running 1\n",
			math.NaN(), 1, math.NaN()},
		{"a prefix of a wanted name is another metric",
			"vllm:num_requests_waiting_total 9\nvllm:num_requests_waiting_by_reason{reason=\"capacity\"} 9\n",
			math.NaN(), math.NaN(), math.NaN()},
		{"KV usage above 1 is clamped",
			"vllm:kv_cache_usage_perc 1.02\n", math.NaN(), math.NaN(), 1},
		{"empty", "", math.NaN(), math.NaN(), math.NaN()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := parseMetrics(kindVLLM, []byte(tc.body))
			if !near(m.waiting, tc.waiting) || !near(m.running, tc.running) || !near(m.kv, tc.kv) {
				t.Fatalf("got waiting=%v running=%v kv=%v, want %v %v %v", m.waiting, m.running, m.kv, tc.waiting, tc.running, tc.kv)
			}
		})
	}
}

// TestScrapeOverHTTP scrapes a server that speaks each engine's dialect,
// at the default <server root>/metrics of a node URL ending in /v1.
func TestScrapeOverHTTP(t *testing.T) {
	var body atomic.Value
	body.Store(string(fixture(t, "vllm_v1.txt")))
	var status atomic.Int32
	status.Store(200)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/metrics" {
			http.NotFound(w, r)
			return
		}
		w.WriteHeader(int(status.Load()))
		_, _ = w.Write([]byte(body.Load().(string)))
	}))
	defer srv.Close()
	p, clk := newTestPool(t, nil, []NodeConfig{{Name: "a", URL: srv.URL + "/v1", Models: []string{"m"}}})
	n := p.Nodes()[0]
	p.ScrapeAll()
	st := p.Status()[0]
	if st.Metrics == nil || st.Metrics.Waiting == nil || *st.Metrics.Waiting != 3 || *st.Metrics.Running != 12 || *st.Metrics.KVUsage != 0.4375 || st.Metrics.Stale {
		t.Fatalf("status metrics %+v", st.Metrics)
	}

	// A failed scrape keeps the old snapshot, which goes stale: unknown.
	status.Store(500)
	clk.Advance(6 * time.Second)
	p.ScrapeAll()
	st = p.Status()[0]
	if !st.Metrics.Stale || !strings.Contains(st.Metrics.Error, "status 500") || st.Metrics.AgeSeconds != 6 {
		t.Fatalf("after failed scrape: %+v", st.Metrics)
	}
	if got := p.score(n, p.nowNanos(), factors{}); got.Memory != unknownScore {
		t.Fatalf("stale memory score %v, want %v", got.Memory, unknownScore)
	}

	// A body without the kind's metrics is an error too.
	status.Store(200)
	body.Store("# nothing here\nprocess_cpu_seconds_total 3\n")
	p.ScrapeAll()
	if st := p.Status()[0]; !strings.Contains(st.Metrics.Error, "none of the engine's load metrics") {
		t.Fatalf("error %q", st.Metrics.Error)
	}
}

// TestRunProbesAndScrapesUntilCanceled: Run probes /health and scrapes
// /metrics on their intervals and returns, with no goroutine left, when
// its context ends (it joins its goroutines before returning).
func TestRunProbesAndScrapesUntilCanceled(t *testing.T) {
	var healthy atomic.Bool
	healthy.Store(true)
	var scrapes atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/health":
			if !healthy.Load() {
				w.WriteHeader(503)
			}
		case "/metrics":
			scrapes.Add(1)
			_, _ = w.Write([]byte(vllmText(1, 0, 0.1)))
		}
	}))
	defer srv.Close()
	cfg := DefaultConfig()
	cfg.HealthInterval, cfg.ScrapeInterval = 20e6, 20e6
	p, err := New(cfg, []NodeConfig{{Name: "a", URL: srv.URL, Models: []string{"m"}}, {Name: "o", URL: srv.URL, Kind: "openai", Models: []string{"m"}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { p.Run(ctx); close(done) }()
	waitFor(t, func() bool { return scrapes.Load() >= 3 }, "scrapes")
	healthy.Store(false)
	waitFor(t, func() bool { return !p.Nodes()[0].Healthy() }, "probe marks the node unhealthy")
	healthy.Store(true)
	waitFor(t, func() bool { return p.Nodes()[0].Healthy() }, "probe restores the node")
	cancel()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return after cancel")
	}
	if p.Nodes()[1].scraped.Load() != nil {
		t.Fatal("an openai node was scraped")
	}
}

func waitFor(t *testing.T, cond func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for: %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// One failed probe is a miss, not an outage: a node that has passed a
// probe turns unhealthy only after health_failures failed probes in a row,
// with one WARN line (then at most one a minute), and one good probe
// restores it. A node that never passed one is out at its first failure.
func TestProbeNeedsFailuresInARow(t *testing.T) {
	var status atomic.Int32
	status.Store(200)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(int(status.Load()))
	}))
	defer srv.Close()
	var logs testenv.Buffer
	cfg := DefaultConfig()
	cfg.HealthFailures = 3
	p, err := New(cfg, []NodeConfig{{Name: "a", URL: srv.URL, Models: []string{"m"}}}, nil,
		WithLogger(slog.New(slog.NewJSONHandler(&logs, nil))))
	if err != nil {
		t.Fatal(err)
	}
	n := p.Nodes()[0]
	p.ProbeAll()
	status.Store(503)
	for i := 1; i <= 2; i++ {
		p.ProbeAll()
		if !n.Healthy() {
			t.Fatalf("unhealthy after %d failed probe(s) of 3", i)
		}
	}
	if st := p.Status()[0]; !strings.Contains(st.ProbeError, "status 503") {
		t.Fatalf("status shows no probe error while the misses count: %+v", st)
	}
	p.ProbeAll()
	if n.Healthy() {
		t.Fatal("healthy after 3 failed probes in a row")
	}
	if c := strings.Count(logs.String(), `"msg":"node unhealthy`); c != 1 || !strings.Contains(logs.String(), `"failed_probes":3`) {
		t.Fatalf("want one WARN line naming 3 failed probes:\n%s", logs.String())
	}
	status.Store(200)
	p.ProbeAll()
	if !n.Healthy() || !strings.Contains(logs.String(), `"msg":"node healthy again"`) {
		t.Fatalf("one good probe did not restore the node:\n%s", logs.String())
	}
	// A flapping node: the next flips within the minute are counted, not logged.
	status.Store(503)
	for i := 0; i < 3; i++ {
		p.ProbeAll()
	}
	if n.Healthy() || strings.Count(logs.String(), `"msg":"node unhealthy`) != 1 {
		t.Fatalf("flip within the minute: healthy=%v\n%s", n.Healthy(), logs.String())
	}
	status.Store(200)
	p.ProbeAll()
	if !n.Healthy() || strings.Count(logs.String(), `"msg":"node healthy again"`) != 1 {
		t.Fatalf("the recovery of an outage that was not logged was logged:\n%s", logs.String())
	}

	// A node that is down from the start is out at once.
	status.Store(503)
	q, err := New(cfg, []NodeConfig{{Name: "b", URL: srv.URL, Models: []string{"m"}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	q.ProbeAll()
	if q.Nodes()[0].Healthy() {
		t.Fatal("a node that never passed a probe is healthy after failing its first")
	}

	bad := DefaultConfig()
	bad.HealthFailures = 0
	if err := bad.Validate(); err == nil || !strings.Contains(err.Error(), "health_failures") {
		t.Fatalf("health_failures 0: %v", err)
	}
}

// TestSGLangCapacityAndHitRate: SGLang publishes no cache_config_info; its
// KV capacity is num_used_tokens over token_usage (188416 / 0.71), and its
// prefix-cache hit rate is the cache_hit_rate gauge. The prefix index ages
// out by that capacity and /admin/nodes shows the rate.
func TestSGLangCapacityAndHitRate(t *testing.T) {
	m := parseMetrics(kindSGLang, fixture(t, "sglang.txt"))
	if math.Abs(m.kvCapacity-188416/0.71) > 1 || m.prefixRate != 0.4212 {
		t.Fatalf("capacity %v, hit rate %v; want %v, 0.4212", m.kvCapacity, m.prefixRate, 188416/0.71)
	}
	nodes := testNodes(1)
	nodes[0].Kind = "sglang"
	p, _ := newTestPool(t, withPrefix, nodes)
	n := p.Node("a")
	feed(p, n, string(fixture(t, "sglang.txt")))
	st := p.Status()[0]
	if st.PrefixIndex.CapacityTokens != int64(265374) {
		t.Fatalf("prefix index capacity %d, want %d", st.PrefixIndex.CapacityTokens, int64(265374))
	}
	if st.Metrics == nil || st.Metrics.PrefixCacheHitRate == nil || *st.Metrics.PrefixCacheHitRate != 0.4212 {
		t.Fatalf("metrics %+v, want the prefix-cache hit rate 0.4212", st.Metrics)
	}
	if vllm := parseMetrics(kindVLLM, fixture(t, "sglang.txt")); vllm.kvCapacity != 0 || !math.IsNaN(vllm.prefixRate) {
		t.Fatalf("read as vLLM: capacity %v, rate %v", vllm.kvCapacity, vllm.prefixRate)
	}
}
