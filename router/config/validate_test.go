package config

import (
	"errors"
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"

	"frontdoor/balancer"
	sim "frontdoor/internal/gpusim"
	"frontdoor/internal/testenv"
	"frontdoor/internal/units"
)

// testConfig is router's testConfig (router/helpers_test.go): the
// defaults, listen on loopback port 0, no cache, the admin surface open to
// loopback, no background probes, and one node on each sim.
func testConfig(sims ...*sim.Server) Config {
	cfg := DefaultConfig()
	cfg.Listen = "127.0.0.1:0"
	cfg.Cache.Backend = "off"
	cfg.Admin.AllowCIDRs = []string{"127.0.0.1/32"}
	cfg.Balancer.HealthInterval = 3600e9
	cfg.Balancer.Backoff.Base, cfg.Balancer.Backoff.Max = 1e6, 5e6
	for i, s := range sims {
		cfg.Nodes = append(cfg.Nodes, balancer.NodeConfig{
			Name: "gpu-" + string(rune('a'+i)), URL: s.URL(), Kind: "vllm",
			Models: []string{"qwen3-8b"}, MaxConcurrency: 10, Weight: 1,
		})
	}
	return cfg
}

// Every section's problems, each under its YAML path, in the order
// check-config has always listed them: the sections in file order, with
// timeouts.client after the shutdown: section, and the checks across
// sections (names used twice, a node on the gateway's own address, the
// model names) where they always stood.
func TestProblemsOfEverySectionInOrder(t *testing.T) {
	const doc = `listen: ":8080"
server: {engine: x}
limits: {max_body_bytes: 10, max_upstream_body_bytes: 10}
timeouts: {connect: 0s, shutdown: 5s, client: 0s}
shutdown: {drain_delay: -1s, grace: -2s}
admin: {listen: ":8080", allow_cidrs: ["10.0.0.0/33", "bogus"]}
logging: {level: loud, format: xml, flush_interval: 2m}
cache: {backend: redis, ttl: 0s}
redis: {url: "", timeout: 0s}
admission: {backend: etcd, global: {rps: -1}, max_wait: -1s, replicas: 0}
tenants:
  - {name: "", api_key_sha256: [abc, "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdeZ"], rps: -1, cache_threshold: 2, cache_model_thresholds: {m: 0}}
  - {name: t, models: [zz, "*"]}
  - {name: t, burst: -1}
nodes:
  - {name: a, url: "http://127.0.0.1:8080", models: [m]}
  - {name: a, url: "x", models: []}
balancer: {policy: fastest}
spillover: {enabled: true, kind: foo, base_url: "", region: "", on: [saturated, never], rpm: -1}
models:
  - {name: "", targets: []}
  - {name: chat, targets: [{model: "", weight: -1}, {model: nope, weight: 1}]}
warm: {hot_entries: -1, tag: "bad tag!", concurrency: 0}
tracing: {sample_ratio: 2}
passthrough: {paths: [/v1/rerank, v1/score, "/v1/a b", /v1/audio/*, /v1/x*, /v1/rerank, /v1/*, /admin/x, /v1/../admin, /tokenize]}
`
	want := []string{
		"server.engine: removed in this version: frontdoor has one HTTP server (fasthttp); delete the key",
		"limits.max_body_bytes: must be at least 1024",
		"limits.max_upstream_body_bytes: must be between 64KiB and 1GiB (a node's whole answer, held in memory while it is read)",
		"timeouts: connect, first_byte, idle and total must all be > 0",
		"timeouts.shutdown: moved to shutdown.grace (with shutdown.drain_delay before it); rename the key",
		"shutdown: drain_delay and grace must be >= 0",
		"timeouts.client: must be > 0",
		"admin.listen: must differ from listen (:8080): the admin listener trusts every request on it",
		`admin.allow_cidrs[0]: invalid CIDR "10.0.0.0/33"`,
		`admin.allow_cidrs[1]: invalid CIDR "bogus"`,
		`logging.level: "loud" is not one of debug, info, warn, error`,
		`logging.format: "xml" is not one of json, text`,
		"logging.flush_interval: must be between 0s and 1m",
		"redis.url: set url or addrs",
		"redis.timeout: must be > 0",
		"cache.ttl: must be > 0",
		`admission.backend: "etcd" is not one of local, redis`,
		"admission.global: rps, burst and tokens_per_minute must be >= 0",
		"admission.max_wait: must be >= 0",
		"admission.replicas: must be >= 1",
		"tenants[0].name: is required",
		"tenants[0].api_key_sha256[0]: must be 64 hex digits",
		"tenants[0].api_key_sha256[1]: must be 64 hex digits",
		"tenants[0]: rps, burst, tokens_per_minute and max_concurrency must be >= 0",
		"tenants[0].cache_threshold: must be in (0, 1], or 0 for cache.semantic.threshold",
		"tenants[0].cache_model_thresholds.m: must be in (0, 1]",
		`tenants[2].name: "t" is used twice`,
		"tenants[2]: rps, burst, tokens_per_minute and max_concurrency must be >= 0",
		"nodes[1].url: missing scheme (want http:// or https://)",
		"nodes[1].models: list at least one model",
		`nodes[1].name: "a" is used twice`,
		`balancer.policy: "fastest" is not one of score, round_robin, least_inflight`,
		`nodes[0].url: "http://127.0.0.1:8080" is this gateway's own address (listen: ":8080", admin.listen: ":8080"): every request would come back to it`,
		`spillover.kind: "foo" is not one of dashscope, openai`,
		"spillover.base_url: is required",
		`spillover.on[1]: "never" is not one of saturated, failed`,
		"spillover: rpm and tpm must be >= 0",
		"models[0].name: is required",
		"models[0].targets: list at least one target",
		"models[1].targets[0]: needs a model and a weight >= 0",
		"warm.hot_entries: must be >= 0",
		"warm.tag: 1 to 128 letters, digits or ._:/@+-",
		"warm.concurrency: must be >= 1",
		"tracing.sample_ratio: must be between 0 and 1",
		`passthrough.paths[1]: "v1/score" must be a path of letters, digits and /_.- such as /v1/rerank, or a prefix such as /v1/audio/*`,
		`passthrough.paths[2]: "/v1/a b" must be a path of letters, digits and /_.- such as /v1/rerank, or a prefix such as /v1/audio/*`,
		`passthrough.paths[4]: "/v1/x*": a prefix ends in /*`,
		`passthrough.paths[5]: "/v1/rerank" is listed twice`,
		`passthrough.paths[6]: "/v1/*" would take /v1/chat/completions, which the gateway answers itself`,
		`passthrough.paths[7]: "/admin/x" would take /admin, which the gateway answers itself`,
		`passthrough.paths[8]: "/v1/../admin" must be a path of letters, digits and /_.- such as /v1/rerank, or a prefix such as /v1/audio/*`,
		`models[1].targets[1].model: "nope" is served by no node and is not in spillover.model_map; served: m`,
		`tenants[1].models[0]: "zz" is neither a served model nor an alias; served: m`,
	}
	_, err := Parse([]byte(doc))
	var ce *ConfigError
	if !errors.As(err, &ce) {
		t.Fatalf("not a ConfigError: %v", err)
	}
	if !slices.Equal(ce.Problems, want) {
		t.Fatalf("problems:\n%q\nwant\n%q", ce.Problems, want)
	}
}

// Config: the bounds and the budget are validated.
func TestBodyLimitsValidate(t *testing.T) {
	for _, c := range []struct{ yaml, want string }{
		{"limits: {max_messages: 0}", "limits.max_messages"},
		{"limits: {max_token_ids: -1}", "limits.max_token_ids"},
		{"limits: {max_content_parts: " + strconv.Itoa(1<<23) + "}", "limits.max_content_parts"},
		{"limits: {parse_budget_bytes: 1MiB}", "limits.parse_budget_bytes"},
		{"limits: {parse_wait: 2m}", "limits.parse_wait"},
	} {
		_, err := Parse([]byte(c.yaml + "\nnodes: [{name: a, url: 'http://127.0.0.1:1', models: [m]}]\n"))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want one naming %s", c.yaml, err, c.want)
		}
	}
	if _, err := Parse([]byte("limits: {max_messages: 5, parse_budget_bytes: 64MiB, parse_wait: 0s}\nnodes: [{name: a, url: 'http://127.0.0.1:1', models: [m]}]\n")); err != nil {
		t.Errorf("valid limits refused: %v", err)
	}
}

// A node URL that does not parse is refused without quoting it, password
// and all (url.Parse's error does).
func TestBadNodeURLErrorHidesCredentials(t *testing.T) {
	cfg := testConfig()
	cfg.Nodes = []balancer.NodeConfig{{Name: "gpu", URL: "http://user:Pa55-w0rd-7e1@10.0.0.5:80x0/v1", Kind: "vllm",
		Models: []string{"qwen3-8b"}, MaxConcurrency: 1, Weight: 1}}
	problems := strings.Join(cfg.Problems(), "\n")
	if !strings.Contains(problems, "nodes[0].url") || strings.Contains(problems, "Pa55-w0rd-7e1") {
		t.Fatalf("problems: %s", problems)
	}
}

// A static node whose URL is the gateway's own listen address is refused
// when the config is checked (serve and check-config).
func TestStaticNodeOnOwnListenAddressRefused(t *testing.T) {
	for _, c := range []struct {
		listen, url string
		refused     bool
	}{
		{"127.0.0.1:9091", "http://127.0.0.1:9091/v1", true}, // admin.listen, below
		{":8080", "http://127.0.0.1:8080/v1", true},
		{"0.0.0.0:8080", "http://localhost:8080", true},
		{"127.0.0.1:8080", "http://127.0.0.1:8080", true},
		{"[::]:80", "http://[::1]/v1", true},
		{"10.0.0.5:8080", "http://u:pw-9f2@10.0.0.5:8080/v1", true},
		{":8080", "http://127.0.0.1:8081/v1", false},
		{":8080", "http://10.0.0.5:8080/v1", false}, // maybe this host, maybe not: discovery checks at run time
		{"127.0.0.1:0", "http://127.0.0.1:0/v1", false},
	} {
		cfg := testConfig()
		cfg.Listen = c.listen
		if c.listen == "127.0.0.1:9091" {
			cfg.Listen, cfg.Admin.Listen = ":8080", c.listen
		}
		cfg.Nodes = []balancer.NodeConfig{{Name: "gpu", URL: c.url, Kind: "vllm", Models: []string{"qwen3-8b"}, MaxConcurrency: 1, Weight: 1}}
		problems := strings.Join(cfg.Problems(), "\n")
		if got := strings.Contains(problems, "nodes[0].url") && strings.Contains(problems, "own address"); got != c.refused {
			t.Errorf("listen %q, node %q: refused %v, want %v: %s", c.listen, c.url, got, c.refused, problems)
		}
		if strings.Contains(problems, "pw-9f2") {
			t.Errorf("the problem shows the node's password: %s", problems)
		}
	}
}

// limits.max_upstream_body_bytes is checked.
func TestMaxUpstreamBodyBytesValidated(t *testing.T) {
	for v, ok := range map[units.Bytes]bool{16 << 20: true, 64 << 10: true, 1 << 30: true, 0: false, -1: false, 1024: false, 2 << 30: false} {
		cfg := testConfig()
		cfg.Limits.MaxUpstreamBodyBytes = v
		p := strings.Join(cfg.Problems(), "\n")
		if ok == strings.Contains(p, "limits.max_upstream_body_bytes") {
			t.Errorf("%d: problems %q", v, p)
		}
	}
}

// spillover.price is checked whether spill-over is on or not: prices are
// numbers >= 0, the currency a few letters.
func TestSpillPriceProblems(t *testing.T) {
	cfg := testConfig(testenv.GPUSim(t, nil))
	cfg.Spillover.Price = SpillPrice{InputPerMillion: -1, OutputPerMillion: math.Inf(1), Currency: "US$"}
	want := []string{
		"spillover.price.input_per_million: must be a number >= 0, got -1",
		"spillover.price.output_per_million: must be a number >= 0, got +Inf",
		`spillover.price.currency: "US$" is not a currency of at most 8 letters (USD, CNY, ...)`,
	}
	if got := cfg.Problems(); !slices.Equal(got, want) {
		t.Fatalf("problems:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	cfg.Spillover.Price = SpillPrice{InputPerMillion: 0.3, OutputPerMillion: 1.2, Currency: "CNY"}
	if got := cfg.Problems(); len(got) != 0 {
		t.Fatalf("a valid price: %q", got)
	}
}
