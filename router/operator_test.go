package router

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	sim "frontdoor/internal/gpusim"
	"frontdoor/internal/telemetry"
	"frontdoor/internal/testenv"
)

// opsGateway is a gateway with everything an operator watches switched on:
// a memory cache with semantic lookups, two small local nodes that a burst
// fills, spill-over to a simulated DashScope, and a rate-limited tenant.
func opsGateway(t *testing.T, mutate func(*Config)) *testGateway {
	t.Helper()
	slow := func(c *sim.Config) { c.TTFT, c.ITL, c.OutputTokens = 40*time.Millisecond, 2*time.Millisecond, 16 }
	a, b := testenv.GPUSim(t, slow), testenv.GPUSim(t, slow)
	dash := dashSim(t, slow)
	cfg := testConfig(a, b)
	for i := range cfg.Nodes {
		cfg.Nodes[i].MaxConcurrency = 2
	}
	spillConfig(t, &cfg, dash)
	cfg.Cache.Backend = "memory"
	cfg.Cache.Semantic.Threshold = 0.5
	t.Setenv("TEST_LIMITED_KEYS", "sk-limited")
	cfg.Tenants = []Tenant{{Name: "limited", APIKeysEnv: "TEST_LIMITED_KEYS", RPS: 0.5, Burst: 1}}
	cfg.Logging.AccessLog = false
	if mutate != nil {
		mutate(&cfg)
	}
	return startGateway(t, cfg)
}

// trafficRound sends one scripted round: exact hits, semantic hits,
// misses, a burst that spills over, and a rate-limited tenant's requests
// that are rejected. It returns the count of each X-Cache / outcome seen.
func trafficRound(t *testing.T, gw *testGateway, round int) map[string]int {
	t.Helper()
	var mu sync.Mutex
	seen := map[string]int{}
	note := func(resp *http.Response) {
		mu.Lock()
		defer mu.Unlock()
		switch {
		case resp.StatusCode == 429:
			seen["rejected"]++
		case resp.StatusCode != 200:
			seen[fmt.Sprint(resp.StatusCode)]++
		case strings.HasPrefix(resp.Header.Get("X-Upstream"), "spillover"):
			seen["spilled"]++
		default:
			seen[resp.Header.Get("X-Cache")]++
		}
	}
	send := func(body string, headers ...string) {
		resp, _ := post(t, gw.URL+"/v1/chat/completions", body, headers...)
		note(resp)
	}
	// A miss, then its exact and semantic hits once it is stored.
	q := fmt.Sprintf("What is the capital of France? (round %d)", round)
	send(cbody(q, ""))
	time.Sleep(30 * time.Millisecond) // the write-back runs after the answer
	send(cbody(q, ""))
	send(cbody(strings.ToLower(strings.TrimSuffix(q, "?")), ""))
	// A burst of distinct misses: 4 local slots, the rest spill over.
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			send(cbody(fmt.Sprintf("Tell me fact number %d of round %d.", i, round), ""))
		}()
	}
	wg.Wait()
	// The limited tenant: a burst of 1, then 429s.
	for range 3 {
		send(cbody(fmt.Sprintf("limited %d", round), ""), "Authorization", "Bearer sk-limited")
	}
	return seen
}

// scrape parses GET /metrics with the Prometheus text parser.
func scrape(t *testing.T, gw *testGateway) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := httpClient.Get(gw.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("/metrics does not parse: %v", err)
	}
	return fams
}

// Every family has # HELP and # TYPE, and the types are right.
func TestMetricsHaveHelpAndType(t *testing.T) {
	gw := opsGateway(t, nil)
	seen := trafficRound(t, gw, 0)
	for _, k := range []string{"miss", "hit-exact", "hit-semantic", "spilled", "rejected"} {
		if seen[k] == 0 {
			t.Fatalf("the traffic produced no %s: %v", k, seen)
		}
	}
	resp, err := httpClient.Get(gw.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	// Without metadata the parser takes everything as untyped: check the
	// lines are there, then what they say.
	for _, want := range []string{"# TYPE frontdoor_request_duration_seconds histogram\n", "# TYPE frontdoor_requests_total counter\n",
		"# HELP frontdoor_requests_total Inference requests answered"} {
		if !strings.Contains(string(raw), want) {
			t.Fatalf("/metrics lacks %q", want)
		}
	}
	fams := scrape(t, gw)
	want := map[string]dto.MetricType{
		"frontdoor_requests_total":           dto.MetricType_COUNTER,
		"frontdoor_request_duration_seconds": dto.MetricType_HISTOGRAM,
		"frontdoor_node_ttft_seconds":        dto.MetricType_HISTOGRAM,
		"frontdoor_cache_similarity":         dto.MetricType_HISTOGRAM,
		"frontdoor_cache_lookup_seconds":     dto.MetricType_HISTOGRAM,
		"frontdoor_admission_wait_seconds":   dto.MetricType_HISTOGRAM,
		"frontdoor_node_inflight":            dto.MetricType_GAUGE,
		"frontdoor_cache_entries":            dto.MetricType_GAUGE,
		"frontdoor_streams_active":           dto.MetricType_GAUGE,
		"frontdoor_spillover_total":          dto.MetricType_COUNTER,
		"frontdoor_admission_rejected_total": dto.MetricType_COUNTER,
		"frontdoor_cache_tokens_saved_total": dto.MetricType_COUNTER,
		"frontdoor_build_info":               dto.MetricType_GAUGE,
		"process_cpu_seconds_total":          dto.MetricType_COUNTER,
		"go_goroutines":                      dto.MetricType_GAUGE,
	}
	for name, typ := range want {
		f := fams[name]
		if f == nil {
			t.Errorf("%s is not exposed", name)
			continue
		}
		if f.GetType() != typ {
			t.Errorf("%s has type %v, want %v", name, f.GetType(), typ)
		}
	}
	for name, f := range fams {
		if f.GetType() == dto.MetricType_UNTYPED {
			t.Errorf("%s is untyped", name)
		}
		if strings.HasPrefix(name, "frontdoor_") && !telemetry.HasHelp(name) {
			t.Errorf("%s has no help text: declare it with telemetry.NewFamily (router/metrics.go)", name)
		}
		if f.GetHelp() == "" {
			t.Errorf("%s has an empty # HELP", name)
		}
		switch {
		case strings.HasSuffix(name, "_total") && f.GetType() != dto.MetricType_COUNTER:
			t.Errorf("%s ends in _total but is a %v", name, f.GetType())
		case strings.HasSuffix(name, "_seconds") && name != "process_start_time_seconds" && f.GetType() == dto.MetricType_COUNTER:
			t.Errorf("%s is a counter of seconds without _total", name)
		}
	}
	if h := fams["frontdoor_request_duration_seconds"].GetMetric(); len(h) == 0 || h[0].GetHistogram().GetSampleCount() == 0 {
		t.Error("frontdoor_request_duration_seconds has no samples after traffic")
	}
	bi := fams["frontdoor_build_info"].GetMetric()
	if len(bi) != 1 || bi[0].GetGauge().GetValue() != 1 {
		t.Fatalf("frontdoor_build_info: %v", bi)
	}
	labels := map[string]string{}
	for _, l := range bi[0].GetLabel() {
		labels[l.GetName()] = l.GetValue()
	}
	if labels["version"] == "" || !strings.HasPrefix(labels["goversion"], "go") {
		t.Fatalf("frontdoor_build_info labels: %v", labels)
	}
}

// Every metric the Grafana dashboard queries is exposed by a running
// frontdoor that has seen hits, misses, spill-overs and rejections.
func TestGrafanaMetricsAreExposed(t *testing.T) {
	dash, err := os.ReadFile("../deploy/grafana/frontdoor.json")
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, n := range regexp.MustCompile(`\b(frontdoor|process|go)_[a-z0-9_]+`).FindAllString(string(dash), -1) {
		names[n] = true
	}
	if len(names) < 10 {
		t.Fatalf("found only %d metric names in the dashboard: %v", len(names), names)
	}
	gw := opsGateway(t, nil)
	trafficRound(t, gw, 0)
	fams := scrape(t, gw)
	for n := range names {
		fam := n
		if f := fams[n]; f == nil {
			for _, suf := range []string{"_bucket", "_sum", "_count"} {
				if base, ok := strings.CutSuffix(n, suf); ok && fams[base] != nil && fams[base].GetType() == dto.MetricType_HISTOGRAM {
					fam = base
				}
			}
		}
		if fams[fam] == nil {
			t.Errorf("the Grafana dashboard queries %s, which /metrics does not expose", n)
		}
	}
}

// Every answer carries X-Request-Id: every route, every method, errors
// included, and a sane client id is echoed.
func TestRequestIDOnEveryAnswer(t *testing.T) {
	t.Setenv("TEST_ADMIN_TOKEN", "a8f8e432998d9af0701319da19bf179f744814bc9d3436fa0ac818363e7bdaa4")
	gw := opsGateway(t, func(c *Config) {
		c.Admin.TokenEnv, c.Admin.AllowCIDRs = "TEST_ADMIN_TOKEN", nil
	})
	auth := "Bearer a8f8e432998d9af0701319da19bf179f744814bc9d3436fa0ac818363e7bdaa4"
	for _, tc := range []struct {
		method, path, body, auth string
		status                   int
	}{
		{"POST", "/v1/chat/completions", chatBody("hi", ""), "", 200},
		{"GET", "/v1/chat/completions", "", "", 405},
		{"POST", "/v1/completions", `{"model":"qwen3-8b","prompt":"hi"}`, "", 200},
		{"POST", "/v1/chat/completions", `{"model":`, "", 400},
		{"POST", "/v1/chat/completions", `{"model":"nope","messages":[{"role":"user","content":"x"}]}`, "", 404},
		{"GET", "/v1/models", "", "", 200},
		{"POST", "/v1/models", "", "", 405},
		{"GET", "/healthz", "", "", 200},
		{"HEAD", "/healthz", "", "", 200},
		{"GET", "/readyz", "", "", 200},
		{"GET", "/metrics", "", "", 200},
		{"GET", "/status", "", auth, 200},
		{"GET", "/status", "", "", 403},
		{"GET", "/dashboard", "", auth, 200},
		{"GET", "/dashboard", "", "", 403},
		{"GET", "/admin/nodes", "", auth, 200},
		{"GET", "/admin/cache/stats", "", auth, 200},
		{"GET", "/admin/nope", "", auth, 404},
		{"GET", "/admin/nodes", "", "", 403},
		{"GET", "/debug/pprof/", "", auth, 200},
		{"GET", "/debug/pprof/", "", "", 403},
		{"GET", "/nope", "", "", 404},
	} {
		for _, given := range []string{"", "client-id-42"} {
			req, _ := http.NewRequest(tc.method, gw.URL+tc.path, strings.NewReader(tc.body))
			if tc.body != "" {
				req.Header.Set("Content-Type", "application/json")
			}
			if tc.auth != "" {
				req.Header.Set("Authorization", tc.auth)
			}
			if given != "" {
				req.Header.Set("X-Request-Id", given)
			}
			resp, err := httpClient.Do(req)
			if err != nil {
				t.Fatalf("%s %s: %v", tc.method, tc.path, err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			id := resp.Header.Get("X-Request-Id")
			if resp.StatusCode != tc.status {
				t.Errorf("%s %s: status %d, want %d", tc.method, tc.path, resp.StatusCode, tc.status)
			}
			switch {
			case given != "" && id != given:
				t.Errorf("%s %s: X-Request-Id %q, want the client's %q", tc.method, tc.path, id, given)
			case given == "" && !regexp.MustCompile(`^[0-9a-f]{16}$`).MatchString(id):
				t.Errorf("%s %s: X-Request-Id %q", tc.method, tc.path, id)
			}
		}
	}
	// Requests fasthttp answers itself (the transport error handler) and
	// ones refused for their framing.
	addr := strings.TrimPrefix(gw.URL, "http://")
	big := strings.Repeat("x", 2*8<<20+1024)
	for name, raw := range map[string]string{
		"ambiguous framing": "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
		"oversize body":     fmt.Sprintf("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(big), big),
	} {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		go func() { _, _ = io.WriteString(c, raw) }()
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		resp.Body.Close()
		c.Close()
		if resp.StatusCode < 400 || resp.Header.Get("X-Request-Id") == "" {
			t.Errorf("%s: status %d, X-Request-Id %q", name, resp.StatusCode, resp.Header.Get("X-Request-Id"))
		}
	}
}
