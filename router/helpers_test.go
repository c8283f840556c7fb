package router

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"frontdoor/balancer"
	sim "frontdoor/internal/gpusim"
	"frontdoor/internal/testenv"
)

// testGateway is a gateway serving on a loopback port for one test.
type testGateway struct {
	*Gateway
	URL  string
	Logs *syncBuffer
}

// testConfig is a config with one node per sim, all serving qwen3-8b. The
// cache is off: cache tests turn it on.
func testConfig(sims ...*sim.Server) Config {
	cfg := DefaultConfig()
	cfg.Listen = "127.0.0.1:0"
	cfg.Cache.Backend = "off"
	// Tests reach the admin surface from loopback; the default (no peer
	// trusted) has tests of its own in admin_test.go.
	cfg.Admin.AllowCIDRs = []string{"127.0.0.1/32"}
	cfg.Balancer.HealthInterval = 3600e9 // tests probe explicitly
	cfg.Balancer.Backoff.Base, cfg.Balancer.Backoff.Max = 1e6, 5e6
	for i, s := range sims {
		cfg.Nodes = append(cfg.Nodes, balancer.NodeConfig{
			Name: "gpu-" + string(rune('a'+i)), URL: s.URL(), Kind: "vllm",
			Models: []string{"qwen3-8b"}, MaxConcurrency: 10, Weight: 1,
		})
	}
	return cfg
}

func startGateway(t testing.TB, cfg Config) *testGateway {
	t.Helper()
	return startGatewayWith(t, cfg, Deps{})
}

// startGatewayWith starts a gateway with deps (its logger is the test's).
func startGatewayWith(t testing.TB, cfg Config, deps Deps) *testGateway {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return startGatewayOn(t, cfg, deps, ln)
}

// startGatewayOn starts a gateway serving on ln.
func startGatewayOn(t testing.TB, cfg Config, deps Deps, ln net.Listener) *testGateway {
	t.Helper()
	logs := &syncBuffer{}
	deps.Logger = NewLogger(cfg.Logging, logs)
	gw, err := New(cfg, deps)
	if err != nil {
		_ = ln.Close()
		t.Fatalf("gateway: %v", err)
	}
	go func() { _ = gw.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = gw.Shutdown(ctx)
	})
	return &testGateway{Gateway: gw, URL: "http://" + ln.Addr().String(), Logs: logs}
}

// probedHealthy probes the gateway's nodes until each has passed a probe
// and is healthy. A gateway probes its nodes once at start (tests set
// health_interval to an hour); on a loaded machine that probe can miss its
// 2s timeout, which marks a node that never passed one unhealthy, and a
// test of what a node answers would get a 503 without ever reaching it.
// Once a node has passed a probe, one late failure leaves it healthy
// (health_failures is 2).
func probedHealthy(t testing.TB, gw *testGateway) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; {
		gw.Pool().ProbeAll()
		healthy := true
		for _, n := range gw.Pool().Nodes() {
			healthy = healthy && n.Healthy()
		}
		if healthy {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the gateway's nodes did not pass a health probe within 30s")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// simAndGateway starts n default sims and a gateway in front of them.
func simAndGateway(t testing.TB, n int, mutate func(*sim.Config)) (*testGateway, []*sim.Server) {
	t.Helper()
	var sims []*sim.Server
	for i := 0; i < n; i++ {
		sims = append(sims, testenv.GPUSim(t, mutate))
	}
	return startGateway(t, testConfig(sims...)), sims
}

var httpClient = &http.Client{Timeout: 30 * time.Second}

func post(t *testing.T, url, body string, headers ...string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("read body: %v", err)
	}
	return resp, b
}

func chatBody(prompt string, extra string) string {
	b, _ := json.Marshal(prompt)
	s := `{"model":"qwen3-8b","messages":[{"role":"user","content":` + string(b) + `}]`
	if extra != "" {
		s += "," + extra
	}
	return s + "}"
}

// streamText reads an SSE chat stream and returns the joined content, the
// number of data events and whether [DONE] arrived.
func streamText(t *testing.T, r io.Reader) (text string, events int, done bool) {
	t.Helper()
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	var sb strings.Builder
	for sc.Scan() {
		line := sc.Text()
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok {
			continue
		}
		if data == "[DONE]" {
			done = true
			continue
		}
		events++
		var chunk struct {
			Choices []struct {
				Delta struct {
					Content string `json:"content"`
				} `json:"delta"`
			} `json:"choices"`
		}
		if err := json.Unmarshal([]byte(data), &chunk); err != nil {
			t.Fatalf("bad chunk %q: %v", data, err)
		}
		for _, c := range chunk.Choices {
			sb.WriteString(c.Delta.Content)
		}
	}
	return sb.String(), events, done
}

// syncBuffer is a goroutine-safe log sink.
type syncBuffer = testenv.Buffer
