package router

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"frontdoor/balancer"
	sim "frontdoor/internal/gpusim"
	"frontdoor/internal/testenv"
	"frontdoor/internal/units"
)

// slowNodeGateway is a gateway in front of one local node that takes
// 400 ms to its first token, with spill-over to a fast simulated DashScope
// and a tenant "local-only" whose traffic may not leave.
func slowNodeGateway(t *testing.T, maxPredicted time.Duration) (*testGateway, *sim.Server, *sim.Server) {
	t.Helper()
	local := testenv.GPUSim(t, func(c *sim.Config) { c.TTFT, c.ITL, c.OutputTokens = 400*time.Millisecond, time.Millisecond, 3 })
	dash := dashSim(t, nil)
	cfg := testConfig(local)
	spillConfig(t, &cfg, dash)
	cfg.Spillover.MaxPredictedTTFT = units.Duration(maxPredicted)
	f := false
	t.Setenv("TEST_LOCAL_ONLY_KEYS", "sk-local-only")
	cfg.Tenants = []Tenant{{Name: "local-only", APIKeysEnv: "TEST_LOCAL_ONLY_KEYS", Spillover: &f}}
	return startGateway(t, cfg), local, dash
}

// warmPredictor streams enough answers from the local node for its TTFT
// predictor to know it (five at a time), and returns the node's status.
func warmPredictor(t *testing.T, gw *testGateway) balancer.NodeStatus {
	t.Helper()
	var wg sync.WaitGroup
	for b := 0; b < balancer.PredictMinObservations/5; b++ {
		for i := 0; i < 5; i++ {
			wg.Add(1)
			go func(i int) {
				defer wg.Done()
				resp, body := post(t, gw.URL+"/v1/chat/completions", chatBody(fmt.Sprintf("warm-up %d %d", b, i), `"stream":true`))
				if resp.StatusCode != 200 || resp.Header.Get("X-Upstream") != "gpu-a" {
					t.Errorf("warm-up: %d %s %s", resp.StatusCode, resp.Header.Get("X-Upstream"), body)
				}
			}(i)
		}
		wg.Wait()
	}
	st := gw.pool.Status()[0]
	if st.Predictor.Observations < balancer.PredictMinObservations || !st.Predictor.Known {
		t.Fatalf("after the warm-up the predictor is %+v", st.Predictor)
	}
	return st
}

// With max_predicted_ttft below what the local node is learned to take,
// a request spills at once, though the node has free slots, and is
// counted with reason predicted_slo; a tenant that may not leave is
// answered locally.
func TestPredictedSpillGoesToHostedAtOnce(t *testing.T) {
	gw, local, dash := slowNodeGateway(t, 150*time.Millisecond)
	st := warmPredictor(t, gw)
	t.Logf("predictor after the warm-up: %+v", st.Predictor)
	if c := st.Predictor.Coefficients; c.Intercept+c.Running < 0.2 {
		t.Fatalf("the predictor did not learn a 400 ms node: %+v", c)
	}
	before := local.Stats().Received
	for i := 0; i < 5; i++ {
		extra := ""
		if i%2 == 0 {
			extra = `"stream":true`
		}
		resp, body := post(t, gw.URL+"/v1/chat/completions", chatBody(fmt.Sprintf("after the warm-up %d", i), extra))
		if resp.StatusCode != 200 || resp.Header.Get("X-Upstream") != "spillover:dashscope" {
			t.Fatalf("request %d: %d, X-Upstream %q: %s", i, resp.StatusCode, resp.Header.Get("X-Upstream"), body)
		}
	}
	// Spilled at once: the slow node never saw them (no time bound here,
	// which a loaded machine could break).
	if got := local.Stats().Received; got != before {
		t.Fatalf("the local node received %d requests predicted too slow", got-before)
	}
	m := metricsText(t, gw)
	if v := metricValue(t, m, `frontdoor_spillover_total{reason="predicted_slo",model="qwen3-8b"}`); v != 5 {
		t.Fatalf("predicted spills counted %v, want 5:\n%s", v, m)
	}
	if dash.Stats().Received != 5 {
		t.Fatalf("the hosted API received %d, want 5", dash.Stats().Received)
	}
	status := (operator{gw.Gateway}).Status()
	if status.Spill == nil || status.Spill.ByReason["predicted_slo"] != 5 || status.Spill.LastPredictedSLO == nil {
		t.Fatalf("/status spill-over: %+v", status.Spill)
	}

	// A tenant whose traffic may not leave waits for the slow node: 200.
	resp, body := post(t, gw.URL+"/v1/chat/completions", chatBody("private", `"stream":true`), "Authorization", "Bearer sk-local-only")
	if resp.StatusCode != 200 || resp.Header.Get("X-Upstream") != "gpu-a" {
		t.Fatalf("local-only tenant: %d, X-Upstream %q: %s", resp.StatusCode, resp.Header.Get("X-Upstream"), body)
	}
	if _, _, done := streamText(t, strings.NewReader(string(body))); !done {
		t.Fatalf("local-only tenant's stream did not finish: %s", body)
	}
	for _, r := range dash.Requests() {
		if strings.Contains(string(r.Body), "private") {
			t.Fatal("a local-only tenant's request reached the hosted API")
		}
	}
}

// Without max_predicted_ttft the same node keeps its traffic; the
// predictor still learns, and its error and prediction are exported.
func TestPredictedSpillOffStaysLocal(t *testing.T) {
	gw, _, dash := slowNodeGateway(t, 0)
	warmPredictor(t, gw)
	for i := 0; i < 5; i++ { // known predictions now: their errors are measured
		resp, body := post(t, gw.URL+"/v1/chat/completions", chatBody(fmt.Sprintf("after the warm-up %d", i), `"stream":true`))
		if resp.StatusCode != 200 || resp.Header.Get("X-Upstream") != "gpu-a" {
			t.Fatalf("request %d: %d, X-Upstream %q: %s", i, resp.StatusCode, resp.Header.Get("X-Upstream"), body)
		}
	}
	if dash.Stats().Received != 0 {
		t.Fatalf("the hosted API received %d requests without max_predicted_ttft", dash.Stats().Received)
	}
	m := metricsText(t, gw)
	if v := metricValue(t, m, `frontdoor_ttft_prediction_error_seconds_count`); v < 5 {
		t.Fatalf("prediction errors counted %v, want >= 5", v)
	}
	if v := metricValue(t, m, `frontdoor_node_predicted_ttft_seconds{node="gpu-a"}`); v < 0.2 || v > 1 {
		t.Fatalf("predicted TTFT of gpu-a %v, want about 0.4", v)
	}
	st := gw.pool.Status()[0].Predictor
	if st.MeanAbsErrorSeconds == nil || *st.MeanAbsErrorSeconds > 0.2 {
		t.Fatalf("predictor %+v: its mean absolute error should be known and small on a steady node", st)
	}
}

// When some free nodes are predicted within the limit and others over it,
// the request goes to one within it, though the picker prefers the other,
// and nothing spills. The fast node's TTFTs are measured as the requests
// go (the predictor learns from each): the limit is far above its 10ms, so
// that a loaded machine's slower answers keep it within.
func TestPredictedLimitPrefersANodeWithinIt(t *testing.T) {
	slow := testenv.GPUSim(t, func(c *sim.Config) { c.TTFT, c.ITL, c.OutputTokens = 4*time.Second, time.Millisecond, 3 })
	fast := testenv.GPUSim(t, func(c *sim.Config) { c.TTFT, c.ITL, c.OutputTokens = 10*time.Millisecond, time.Millisecond, 3 })
	dash := dashSim(t, nil)
	cfg := testConfig(slow, fast)
	cfg.Nodes[0].Weight = 10 // the picker's favourite by far
	spillConfig(t, &cfg, dash)
	cfg.Spillover.MaxPredictedTTFT = units.Duration(2 * time.Second)
	gw := startGateway(t, cfg)
	teach := func(n *balancer.Node, ttft time.Duration) {
		for i := 0; i < balancer.PredictMinObservations; i++ {
			gw.pool.ObserveTTFT(n, gw.pool.PredictTTFT(n, balancer.Hints{PromptTokens: 10}), ttft)
		}
	}
	teach(gw.pool.Node("gpu-a"), 4*time.Second)
	teach(gw.pool.Node("gpu-b"), 10*time.Millisecond)
	for i := 0; i < 5; i++ {
		resp, body := post(t, gw.URL+"/v1/chat/completions", chatBody(fmt.Sprintf("q %d", i), `"stream":true`))
		if resp.StatusCode != 200 || resp.Header.Get("X-Upstream") != "gpu-b" {
			t.Fatalf("request %d: %d, X-Upstream %q (want gpu-b, the node predicted within the limit): %s", i, resp.StatusCode, resp.Header.Get("X-Upstream"), body)
		}
	}
	if dash.Stats().Received != 0 || slow.Stats().Received != 0 {
		t.Fatalf("hosted %d, slow node %d requests: want none", dash.Stats().Received, slow.Stats().Received)
	}
}

// The limit of a request: the tenant's, else its served model's, else the
// global one.
func TestPredictedLimitPrecedence(t *testing.T) {
	s := testenv.GPUSim(t, nil)
	dash := dashSim(t, nil)
	cfg := testConfig(s)
	spillConfig(t, &cfg, dash)
	cfg.Spillover.MaxPredictedTTFT = units.Duration(time.Second)
	cfg.Spillover.MaxPredictedTTFTModels = map[string]units.Duration{"qwen3-8b": units.Duration(2 * time.Second)}
	gw := startGateway(t, cfg)
	plain, strict := &tenant{name: "plain"}, &tenant{name: "strict", cfg: Tenant{MaxPredictedTTFT: units.Duration(300 * time.Millisecond)}}
	for _, c := range []struct {
		tenant *tenant
		model  string
		want   time.Duration
	}{
		{plain, "qwen3-8b", 2 * time.Second},
		{plain, "other", time.Second},
		{strict, "qwen3-8b", 300 * time.Millisecond},
		{strict, "other", 300 * time.Millisecond},
	} {
		if got := gw.up.maxPredictedTTFT(&exchange{tenant: c.tenant, model: c.model}); got != c.want {
			t.Errorf("tenant %s, model %s: limit %v, want %v", c.tenant.name, c.model, got, c.want)
		}
	}
}
