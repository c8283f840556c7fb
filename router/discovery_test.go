package router

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"frontdoor/balancer"
	"frontdoor/cmd/gpusim/sim"
	"frontdoor/internal/testenv"
)

// DNS discovery against a real DNS server on loopback whose records change:
// a vLLM "headless Service" grows, shrinks, fails and recovers. Nodes join
// and leave, a stream in flight on a node that left completes, and a
// failing resolver keeps the nodes found before, loudly.
func TestDNSDiscoveryFollowsTheRecords(t *testing.T) {
	const host = "vllm-headless.frontdoor.test"
	d := testenv.StartDNS(t)
	// Three nodes on one port at three loopback addresses, as pods behind
	// a headless Service.
	port := testenv.FreePort(t)
	sims := map[string]*sim.Server{}
	for _, ip := range []string{"127.0.0.2", "127.0.0.3", "127.0.0.4"} {
		sims[ip] = testenv.GPUSim(t, func(c *sim.Config) {
			c.Listen = fmt.Sprintf("%s:%d", ip, port)
			c.ITL, c.OutputTokens = 25*time.Millisecond, 40 // a stream lasts about a second
		})
	}
	d.Set(host, "127.0.0.2")

	cfg := testConfig()
	cfg.Balancer.DNSResolver = d.Addr()
	cfg.Balancer.HealthInterval = 50e6
	cfg.Balancer.Weights.Prefix = 0 // the same prompt again must spread over the nodes found, not follow its prefix
	cfg.Nodes = []balancer.NodeConfig{{Name: "vllm", URL: fmt.Sprintf("http://%s:%d/v1", host, port), Kind: "vllm",
		Models: []string{"qwen3-8b"}, MaxConcurrency: 8, Weight: 1, Discover: "dns", DiscoverInterval: 50e6}}
	gw := startGateway(t, cfg)

	nodes := func() []string {
		var out []string
		for _, n := range gw.Pool().Status() {
			out = append(out, n.Name+"="+n.State)
		}
		slices.Sort(out)
		return out
	}
	waitNodes := func(want ...string) {
		t.Helper()
		testenv.Eventually(t, 5*time.Second, func() bool { return slices.Equal(nodes(), want) },
			"nodes %v, want %v", nodes(), want)
	}
	upstream := func() string {
		resp, body := post(t, gw.URL+"/v1/chat/completions", chatBody("hello", ""))
		if resp.StatusCode != 200 {
			t.Fatalf("status %d: %s", resp.StatusCode, body)
		}
		return resp.Header.Get("X-Upstream")
	}

	waitNodes("vllm-127.0.0.2=healthy")
	if u := upstream(); u != "vllm-127.0.0.2" {
		t.Fatalf("served by %q", u)
	}

	// Scale up: a second record, a second node, both used.
	d.Set(host, "127.0.0.2", "127.0.0.3")
	waitNodes("vllm-127.0.0.2=healthy", "vllm-127.0.0.3=healthy")
	seen := map[string]bool{}
	for i := 0; i < 40 && len(seen) < 2; i++ {
		seen[upstream()] = true
	}
	if !seen["vllm-127.0.0.3"] {
		t.Fatalf("the new node took no request: %v", seen)
	}

	// A stream on .2; then .2's record goes (and .4 comes) while it runs.
	d.Set(host, "127.0.0.2")
	waitNodes("vllm-127.0.0.2=healthy")
	req, _ := http.NewRequest(http.MethodPost, gw.URL+"/v1/chat/completions",
		strings.NewReader(chatBody("a long story", `"stream":true`)))
	req.Header.Set("Content-Type", "application/json")
	resp, err := httpClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("X-Upstream") != "vllm-127.0.0.2" {
		t.Fatalf("stream: status %d upstream %q", resp.StatusCode, resp.Header.Get("X-Upstream"))
	}
	d.Set(host, "127.0.0.3", "127.0.0.4")
	waitNodes("vllm-127.0.0.2=removed", "vllm-127.0.0.3=healthy", "vllm-127.0.0.4=healthy")
	before := sims["127.0.0.2"].Stats().Received
	for i := 0; i < 10; i++ {
		if u := upstream(); u == "vllm-127.0.0.2" {
			t.Fatal("a removed node took a new request")
		}
	}
	text, events, done := streamText(t, resp.Body)
	if !done || events < 40 || text == "" {
		t.Fatalf("the stream on the removed node was cut: %d events, done %v", events, done)
	}
	if got := sims["127.0.0.2"].Stats().Received; got != before {
		t.Fatalf("the removed node received %d new requests", got-before)
	}
	// Drained, it is forgotten, metrics included.
	waitNodes("vllm-127.0.0.3=healthy", "vllm-127.0.0.4=healthy")
	if m := metricsText(t, gw); strings.Contains(m, `node="vllm-127.0.0.2"`) || !strings.Contains(m, `frontdoor_node_inflight{node="vllm-127.0.0.4"}`) {
		t.Fatalf("node series not following the node set:\n%s", grepLines(m, "frontdoor_node_inflight"))
	}

	// The resolver fails: the nodes stay, and it is loud (log, metric, /status).
	d.SetFailing(true)
	testenv.Eventually(t, 5*time.Second, func() bool {
		return strings.Contains(gw.Logs.String(), "discovery: lookup failed; keeping the nodes found before")
	}, "no WARN line for a failing resolver:\n%s", gw.Logs.String())
	if u := upstream(); u != "vllm-127.0.0.3" && u != "vllm-127.0.0.4" {
		t.Fatalf("served by %q while the resolver fails", u)
	}
	var st Status
	getJSON(t, gw.URL+"/status", &st)
	if len(st.Discovery) != 1 || st.Discovery[0].Error == "" || len(st.Discovery[0].Addrs) != 2 {
		t.Fatalf("/status discovery while failing: %+v", st.Discovery)
	}
	if m := metricsText(t, gw); !strings.Contains(m, `frontdoor_discovery_errors_total{entry="vllm"}`) {
		t.Fatal("no discovery error metric")
	}
	waitNodes("vllm-127.0.0.3=healthy", "vllm-127.0.0.4=healthy")

	// It recovers; then the name goes away altogether (scaled to zero):
	// no node, and requests are refused as unavailable, not unknown.
	d.SetFailing(false)
	d.Set(host)
	waitNodes()
	resp2, body := post(t, gw.URL+"/v1/chat/completions", chatBody("hello", ""))
	if resp2.StatusCode != 503 {
		t.Fatalf("no node: status %d: %s", resp2.StatusCode, body)
	}
	d.Set(host, "127.0.0.4")
	waitNodes("vllm-127.0.0.4=healthy")
	if u := upstream(); u != "vllm-127.0.0.4" {
		t.Fatalf("served by %q", u)
	}
}

func grepLines(s, substr string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, substr) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

func getJSON(t *testing.T, url string, v any) {
	t.Helper()
	resp, err := httpClient.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
}
