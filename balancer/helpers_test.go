package balancer

import (
	"math"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"frontdoor/internal/testenv"
)

// testNodes returns n vllm nodes serving "m", named a, b, c, ...
func testNodes(n int) []NodeConfig {
	var out []NodeConfig
	for i := 0; i < n; i++ {
		name := string(rune('a' + i))
		out = append(out, NodeConfig{Name: name, URL: "http://127.0.0.1:1/" + name, Models: []string{"m"}, MaxConcurrency: 10})
	}
	return out
}

// newTestPool builds a pool on a fake clock.
func newTestPool(t testing.TB, mutate func(*Config), nodes []NodeConfig) (*Pool, *testenv.Clock) {
	t.Helper()
	cfg := DefaultConfig()
	if mutate != nil {
		mutate(&cfg)
	}
	clk := testenv.NewClock()
	p, err := New(cfg, nodes, nil, WithClock(clk.Now))
	if err != nil {
		t.Fatal(err)
	}
	return p, clk
}

func fixture(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// feed records a scrape of body on n, as a scrape at the pool's now would.
func feed(p *Pool, n *Node, body string) {
	p.record(n, parseMetrics(n.kind, []byte(body)), n.inflight.Load())
}

// vllmText is a minimal vLLM v1 exposition.
func vllmText(running, waiting, kv float64) string {
	return "# TYPE vllm:num_requests_running gauge\n" +
		"vllm:num_requests_running{engine=\"0\",model_name=\"m\"} " + ftoa(running) + "\n" +
		"vllm:num_requests_waiting{engine=\"0\",model_name=\"m\"} " + ftoa(waiting) + "\n" +
		"vllm:kv_cache_usage_perc{engine=\"0\",model_name=\"m\"} " + ftoa(kv) + "\n"
}

func ftoa(v float64) string {
	if math.IsNaN(v) {
		return "NaN"
	}
	return strconv.FormatFloat(v, 'g', -1, 64)
}

func near(a, b float64) bool {
	if math.IsNaN(a) || math.IsNaN(b) {
		return math.IsNaN(a) && math.IsNaN(b)
	}
	return math.Abs(a-b) < 1e-9
}

func names(ns []*Node) []string {
	out := make([]string, len(ns))
	for i, n := range ns {
		out[i] = n.Name()
	}
	return out
}

// acquire takes k slots on n.
func acquire(t testing.TB, n *Node, k int) {
	t.Helper()
	for i := 0; i < k; i++ {
		if !n.TryAcquire() {
			t.Fatalf("%s: acquire %d of %d failed", n.Name(), i+1, k)
		}
	}
}
