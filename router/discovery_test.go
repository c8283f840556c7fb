package router

import (
	"encoding/json"
	"fmt"
	"maps"
	"math/rand/v2"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"frontdoor/balancer"
	sim "frontdoor/internal/gpusim"
	"frontdoor/internal/testenv"
	"frontdoor/router/admin"
)

// DNS discovery against a real DNS server on loopback whose records change:
// a vLLM "headless Service" grows, shrinks, fails and recovers. Nodes join
// and leave, a stream in flight on a node that left completes, and a
// failing resolver keeps the nodes found before, loudly.
func TestDNSDiscoveryFollowsTheRecords(t *testing.T) {
	const host = "vllm-headless.frontdoor.test"
	d := testenv.StartDNS(t)
	// Three nodes on one port at three loopback addresses, as pods behind
	// a headless Service (discover_allow: [loopback] lets them in).
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
		Models: []string{"qwen3-8b"}, MaxConcurrency: 8, Weight: 1, Discover: "dns", DiscoverInterval: 50e6,
		DiscoverAllow: []string{"loopback"}}} // the pods are on this host
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
	var st admin.Status
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

func grepLines(s, substr string) string { return strings.Join(linesWith(s, substr), "\n") }

// linesWith returns the lines of s holding substr.
func linesWith(s, substr string) []string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, substr) {
			out = append(out, l)
		}
	}
	return out
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

// discoveryConfig is a gateway config with discover: dns entries asking d,
// each resolving host every 50 ms. The entries' nodes are kind openai (no
// scrape) and their health probes go to a closed loopback port, so no
// packet leaves the host whatever the addresses.
func discoveryConfig(t *testing.T, d *testenv.DNSServer, entries ...balancer.NodeConfig) Config {
	t.Helper()
	cfg := testConfig()
	withAdminToken(t, &cfg)
	cfg.Balancer.DNSResolver = d.Addr()
	for _, e := range entries {
		e.Kind, e.Models, e.MaxConcurrency, e.Weight = "openai", []string{"qwen3-8b"}, 4, 1
		e.Discover, e.DiscoverInterval = "dns", 50e6
		if e.HealthURL == "" {
			e.HealthURL = "http://127.0.0.1:9/health"
		}
		cfg.Nodes = append(cfg.Nodes, e)
	}
	return cfg
}

// adminNodeNames returns the names of the nodes /admin/nodes lists, sorted.
func adminNodeNames(t *testing.T, gw *testGateway) []string {
	t.Helper()
	var nodes []struct {
		Name string `json:"name"`
	}
	if err := json.Unmarshal(adminGet(t, gw, "/admin/nodes"), &nodes); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, n := range nodes {
		out = append(out, n.Name)
	}
	slices.Sort(out)
	return out
}

// discoveryEntry is one entry of /status → discovery, as a client reads it.
type discoveryEntry struct {
	Entry        string         `json:"entry"`
	Addrs        []string       `json:"addrs"`
	Dropped      map[string]int `json:"dropped"`
	DroppedAddrs []struct {
		Addr, Reason string
	} `json:"dropped_addrs"`
}

func statusDiscovery(t *testing.T, gw *testGateway, entry string) discoveryEntry {
	t.Helper()
	var st struct {
		Discovery []discoveryEntry `json:"discovery"`
	}
	if err := json.Unmarshal(adminGet(t, gw, "/status"), &st); err != nil {
		t.Fatal(err)
	}
	for _, e := range st.Discovery {
		if e.Entry == entry {
			return e
		}
	}
	t.Fatalf("no entry %q in /status discovery: %+v", entry, st.Discovery)
	return discoveryEntry{}
}

// waitLookups waits until d has answered n more queries: n/2 lookups at
// least (A and AAAA each).
func waitLookups(t *testing.T, d *testenv.DNSServer, n int) {
	t.Helper()
	start := d.Queries()
	testenv.Eventually(t, 10*time.Second, func() bool { return d.Queries() >= start+n }, "the resolver was not asked again")
}

const dropLine = "discovery: addresses dropped"

// A resolver answering unspecified, loopback, link-local (the cloud
// metadata address among them) and multicast addresses makes no node of
// them: only the private addresses become nodes. What was dropped shows in
// /status, in frontdoor_discovery_dropped_total and in one WARN line that
// names the key letting loopback in, not a line per lookup.
func TestDNSDiscoveryDropsSpecialAddresses(t *testing.T) {
	const host = "vllm-special.frontdoor.test"
	d := testenv.StartDNS(t)
	d.Set(host, "0.0.0.0", "::", "127.0.0.1", "::1", "169.254.169.254", "169.254.7.7", "fe80::1",
		"224.0.0.251", "ff02::1", "10.99.0.1", "fd00::7")
	cfg := discoveryConfig(t, d, balancer.NodeConfig{Name: "vllm", URL: "http://" + host + ":8000/v1"})
	gw := startGateway(t, cfg)

	want := []string{"vllm-10.99.0.1", "vllm-fd00::7"}
	testenv.Eventually(t, 5*time.Second, func() bool { return len(adminNodeNames(t, gw)) > 0 }, "no node discovered")
	waitLookups(t, d, 20)
	if got := adminNodeNames(t, gw); !slices.Equal(got, want) {
		t.Fatalf("/admin/nodes lists %v, want only %v", got, want)
	}
	ds := statusDiscovery(t, gw, "vllm")
	wantDropped := map[string]int{"unspecified": 2, "loopback": 2, "link_local": 2, "metadata": 1, "multicast": 2}
	if !maps.Equal(ds.Dropped, wantDropped) || len(ds.DroppedAddrs) != 9 {
		t.Fatalf("/status discovery dropped %v %v, want %v", ds.Dropped, ds.DroppedAddrs, wantDropped)
	}
	for reason, n := range wantDropped {
		series := `frontdoor_discovery_dropped_total{entry="vllm",reason="` + reason + `"}`
		if v := metricValue(t, metricsText(t, gw), series); v < float64(n) {
			t.Fatalf("%s = %v, want >= %d", series, v, n)
		}
	}
	lines := linesWith(gw.Logs.String(), dropLine)
	if len(lines) != 1 {
		t.Fatalf("%d %q lines after many lookups, want 1:\n%s", len(lines), dropLine, strings.Join(lines, "\n"))
	}
	for _, s := range []string{`"level":"WARN"`, host, "loopback=2", "metadata=1", "discover_allow: [loopback, link_local]", `nodes[] entry \"vllm\"`, "169.254.169.254"} {
		if !strings.Contains(lines[0], s) {
			t.Fatalf("the WARN line lacks %q: %s", s, lines[0])
		}
	}
}

// discover_allow: [loopback] lets loopback addresses become nodes (a
// local test, a compose file resolving to this host); an entry without it
// resolving the same name gets none.
func TestDNSDiscoveryAllowLoopback(t *testing.T) {
	const host = "vllm-local.frontdoor.test"
	d := testenv.StartDNS(t)
	port := testenv.FreePort(t)
	testenv.GPUSim(t, func(c *sim.Config) { c.Listen = fmt.Sprintf("127.0.0.2:%d", port) })
	d.Set(host, "127.0.0.2")
	url := fmt.Sprintf("http://%s:%d/v1", host, port)
	cfg := discoveryConfig(t, d, balancer.NodeConfig{Name: "strict", URL: url},
		balancer.NodeConfig{Name: "local", URL: url, DiscoverAllow: []string{"loopback"}})
	for i := range cfg.Nodes {
		cfg.Nodes[i].Kind, cfg.Nodes[i].HealthURL = "vllm", ""
	}
	gw := startGateway(t, cfg)

	testenv.Eventually(t, 5*time.Second, func() bool { return slices.Equal(adminNodeNames(t, gw), []string{"local-127.0.0.2"}) },
		"nodes %v, want [local-127.0.0.2]", adminNodeNames(t, gw))
	waitLookups(t, d, 10)
	if got := adminNodeNames(t, gw); !slices.Equal(got, []string{"local-127.0.0.2"}) {
		t.Fatalf("nodes %v", got)
	}
	resp, body := post(t, gw.URL+"/v1/chat/completions", chatBody("hello", ""))
	if resp.StatusCode != 200 || resp.Header.Get("X-Upstream") != "local-127.0.0.2" {
		t.Fatalf("status %d upstream %q: %s", resp.StatusCode, resp.Header.Get("X-Upstream"), body)
	}
	if ds := statusDiscovery(t, gw, "strict"); ds.Dropped["loopback"] != 1 || len(ds.Addrs) != 0 {
		t.Fatalf("strict entry: %+v", ds)
	}
	if ds := statusDiscovery(t, gw, "local"); len(ds.Dropped) != 0 || !slices.Equal(ds.Addrs, []string{"127.0.0.2"}) {
		t.Fatalf("local entry: %+v", ds)
	}
	if lines := linesWith(gw.Logs.String(), dropLine); len(lines) != 1 || !strings.Contains(lines[0], `"entry":"strict"`) {
		t.Fatalf("drop lines: %v", lines)
	}
}

// 600 records make 256 nodes (discover_max_nodes' default), the first 256
// in address order, the same at every lookup; the rest are counted and
// reported in one WARN line, not one per record or per lookup. The answer
// is too large for UDP: the resolver is asked again over TCP.
func TestDNSDiscoveryCapsRecordsPerName(t *testing.T) {
	const host = "vllm-many.frontdoor.test"
	d := testenv.StartDNS(t)
	var addrs []string
	for i := range 600 {
		addrs = append(addrs, fmt.Sprintf("10.77.%d.%d", i/250, i%250+1))
	}
	shuffled := slices.Clone(addrs)
	rand.New(rand.NewPCG(1, 2)).Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
	d.Set(host, shuffled...)
	cfg := discoveryConfig(t, d, balancer.NodeConfig{Name: "vllm", URL: "http://" + host + ":8000/v1"},
		balancer.NodeConfig{Name: "few", URL: "http://" + host + ":8000/v1", DiscoverMaxNodes: 3})
	gw := startGateway(t, cfg)

	var want []string
	for _, a := range addrs[:256] { // addrs is in address order
		want = append(want, "vllm-"+a)
	}
	want = append(want, "few-10.77.0.1", "few-10.77.0.2", "few-10.77.0.3")
	slices.Sort(want)
	testenv.Eventually(t, 10*time.Second, func() bool { return len(adminNodeNames(t, gw)) >= len(want) },
		"%d nodes, want %d", len(adminNodeNames(t, gw)), len(want))
	waitLookups(t, d, 40)
	if got := adminNodeNames(t, gw); !slices.Equal(got, want) {
		t.Fatalf("%d nodes, want %d: %v", len(got), len(want), got)
	}
	if ds := statusDiscovery(t, gw, "vllm"); ds.Dropped["over_cap"] != 344 || len(ds.Addrs) != 256 || len(ds.DroppedAddrs) == 0 {
		t.Fatalf("/status discovery: %d addrs, dropped %v", len(ds.Addrs), ds.Dropped)
	}
	if v := metricValue(t, metricsText(t, gw), `frontdoor_discovery_dropped_total{entry="vllm",reason="over_cap"}`); v < 344 {
		t.Fatalf("over_cap counter %v", v)
	}
	lines := linesWith(gw.Logs.String(), dropLine)
	var vllm []string
	for _, l := range lines {
		if strings.Contains(l, `"entry":"vllm"`) {
			vllm = append(vllm, l)
		}
	}
	if len(vllm) != 1 || !strings.Contains(vllm[0], "over_cap=344") || !strings.Contains(vllm[0], "discover_max_nodes") {
		t.Fatalf("want one WARN line for entry vllm naming over_cap=344 and discover_max_nodes, got %d:\n%s", len(vllm), strings.Join(lines, "\n"))
	}
	if n := len(linesWith(gw.Logs.String(), "discovery: nodes changed")); n != 2 {
		t.Fatalf("the node set changed %d times, want once per entry", n)
	}
}

// A record naming the gateway itself (its address and the node's port)
// never becomes a node: requests would loop. First a gateway listening on
// one loopback address, known only from its listener; then one listening
// on every address (":port"), where any address of the host is itself.
func TestDNSDiscoveryDropsSelf(t *testing.T) {
	const host = "vllm-self.frontdoor.test"
	t.Run("bound address", func(t *testing.T) {
		d := testenv.StartDNS(t)
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := ln.Addr().(*net.TCPAddr).Port
		testenv.GPUSim(t, func(c *sim.Config) { c.Listen = fmt.Sprintf("127.0.0.2:%d", port) })
		d.Set(host, "127.0.0.1", "127.0.0.2")
		cfg := discoveryConfig(t, d, balancer.NodeConfig{Name: "vllm", URL: fmt.Sprintf("http://%s:%d/v1", host, port),
			DiscoverAllow: []string{"loopback"}})
		cfg.Nodes[0].Kind, cfg.Nodes[0].HealthURL = "vllm", ""
		gw := startGatewayOn(t, cfg, Deps{}, ln) // cfg.Listen stays 127.0.0.1:0

		testenv.Eventually(t, 5*time.Second, func() bool { return len(adminNodeNames(t, gw)) > 0 }, "no node discovered")
		waitLookups(t, d, 10)
		if got := adminNodeNames(t, gw); !slices.Equal(got, []string{"vllm-127.0.0.2"}) {
			t.Fatalf("nodes %v, want [vllm-127.0.0.2]", got)
		}
		if ds := statusDiscovery(t, gw, "vllm"); ds.Dropped["self"] != 1 {
			t.Fatalf("/status discovery: %+v", ds)
		}
		if v := metricValue(t, metricsText(t, gw), `frontdoor_discovery_dropped_total{entry="vllm",reason="self"}`); v < 1 {
			t.Fatalf("self counter %v", v)
		}
		if lines := linesWith(gw.Logs.String(), dropLine); len(lines) != 1 || !strings.Contains(lines[0], "self=1") || !strings.Contains(lines[0], "loop") {
			t.Fatalf("drop lines: %v", lines)
		}
		for range 5 {
			if resp, body := post(t, gw.URL+"/v1/chat/completions", chatBody("hello", "")); resp.StatusCode != 200 || resp.Header.Get("X-Upstream") != "vllm-127.0.0.2" {
				t.Fatalf("status %d upstream %q: %s", resp.StatusCode, resp.Header.Get("X-Upstream"), body)
			}
		}
	})
	t.Run("every address", func(t *testing.T) {
		d := testenv.StartDNS(t)
		port := testenv.FreePort(t)
		ln, err := net.Listen("tcp", fmt.Sprintf(":%d", port))
		if err != nil {
			t.Fatal(err)
		}
		self := []string{"127.0.0.1", "127.0.0.9"}
		if ifas, err := net.InterfaceAddrs(); err == nil {
			for _, ia := range ifas {
				if p, err := netip.ParsePrefix(ia.String()); err == nil && !p.Addr().IsLoopback() && !p.Addr().IsLinkLocalUnicast() {
					self = append(self, p.Addr().String()) // this host's own address
				}
			}
		}
		d.Set(host, self...)
		cfg := discoveryConfig(t, d, balancer.NodeConfig{Name: "vllm", URL: fmt.Sprintf("http://%s:%d/v1", host, port),
			DiscoverAllow: []string{"loopback"}})
		cfg.Listen = fmt.Sprintf(":%d", port)
		gw := startGatewayOn(t, cfg, Deps{}, ln)
		gw.URL = fmt.Sprintf("http://127.0.0.1:%d", port)

		waitLookups(t, d, 10)
		if got := adminNodeNames(t, gw); len(got) != 0 {
			t.Fatalf("nodes %v, want none: every address is the gateway's own", got)
		}
		if ds := statusDiscovery(t, gw, "vllm"); ds.Dropped["self"] != len(self) {
			t.Fatalf("/status discovery: %+v, want %d dropped as self", ds, len(self))
		}
	})
}
