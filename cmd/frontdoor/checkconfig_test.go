package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// validBase is a config serve starts with; each case below adds to it.
const validBase = "listen: 127.0.0.1:0\nnodes:\n  - {name: a, url: http://127.0.0.1:1, models: [m]}\n"

// badConfigs holds one config per validation check, each with a problem
// its message must contain. body replaces validBase when it has nodes:.
var badConfigs = []struct{ name, body, want string }{
	// Top level and the gateway's own sections.
	{"listen", "listen: \"8080\"\nnodes: [{name: a, url: http://127.0.0.1:1, models: [m]}]\n", `listen: "8080" has no host part`},
	{"listen port", "listen: \"localhost:99999\"\nnodes: [{name: a, url: http://127.0.0.1:1, models: [m]}]\n", "port \"99999\" is not a number"},
	{"no nodes", "listen: 127.0.0.1:0\n", "nodes: configure at least one node (or enable spillover)"},
	{"server.engine", "server: {engine: x}\n", "server.engine: removed in this version"},
	{"limits.max_body_bytes", "limits: {max_body_bytes: 10}\n", "limits.max_body_bytes: must be at least 1024"},
	{"limits.max_upstream_body_bytes", "limits: {max_upstream_body_bytes: 10}\n", "limits.max_upstream_body_bytes: must be between 64KiB and 1GiB"},
	{"limits.max_messages", "limits: {max_messages: 0}\n", "limits.max_messages: must be between 1 and"},
	{"limits.parse_budget_bytes", "limits: {parse_budget_bytes: 1048576}\n", "limits.parse_budget_bytes: must be at least 4 times max_body_bytes"},
	{"limits.parse_wait", "limits: {parse_wait: 2m}\n", "limits.parse_wait: must be between 0 and 1m"},
	{"timeouts", "timeouts: {connect: 0s}\n", "timeouts: connect, first_byte, idle and total must all be > 0"},
	{"timeouts.shutdown", "timeouts: {shutdown: 5s}\n", "timeouts.shutdown: moved to shutdown.grace"},
	{"timeouts.client", "timeouts: {client: 0s}\n", "timeouts.client: must be > 0"},
	{"shutdown", "shutdown: {grace: -1s}\n", "shutdown: drain_delay and grace must be >= 0"},
	{"admin.listen", "admin: {listen: nowhere}\n", "admin.listen: \"nowhere\" is not host:port"},
	{"admin.listen same", "listen: 127.0.0.1:9\nadmin: {listen: 127.0.0.1:9}\nnodes: [{name: a, url: http://127.0.0.1:1, models: [m]}]\n", "admin.listen: must differ from listen"},
	{"admin.allow_cidrs", "admin: {allow_cidrs: [banana]}\n", "admin.allow_cidrs[0]:"},
	{"logging.level", "logging: {level: loud}\n", `logging.level: "loud" is not one of debug, info, warn, error`},
	{"logging.format", "logging: {format: xml}\n", `logging.format: "xml" is not one of json, text`},
	{"logging.flush_interval", "logging: {flush_interval: 2m}\n", "logging.flush_interval: must be between 0s and 1m"},
	{"redis", "cache: {backend: redis}\nredis: {url: \"\", addrs: []}\n", "redis.url: set url or addrs"},
	{"admission.backend", "admission: {backend: etcd}\n", `admission.backend: "etcd" is not one of local, redis`},
	{"admission.global", "admission: {global: {rps: -1}}\n", "admission.global: rps, burst and tokens_per_minute must be >= 0"},
	{"admission.max_wait", "admission: {max_wait: -1s}\n", "admission.max_wait: must be >= 0"},
	{"admission.replicas", "admission: {replicas: 0}\n", "admission.replicas: must be >= 1"},
	{"tenants.name", "tenants: [{rps: 1}]\n", "tenants[0].name: is required"},
	{"tenants.name twice", "tenants: [{name: t}, {name: t}]\n", `tenants[1].name: "t" is used twice`},
	{"tenants.api_key_sha256", "tenants: [{name: t, api_key_sha256: [zz]}]\n", "tenants[0].api_key_sha256[0]: must be 64 hex digits"},
	{"tenants.limits", "tenants: [{name: t, rps: -1}]\n", "tenants[0]: rps, burst, tokens_per_minute and max_concurrency must be >= 0"},
	{"tenants.cache_threshold", "tenants: [{name: t, cache_threshold: 2}]\n", "tenants[0].cache_threshold: must be in (0, 1]"},
	{"tenants.cache_model_thresholds", "tenants: [{name: t, cache_model_thresholds: {m: 0}}]\n", "tenants[0].cache_model_thresholds.m: must be in (0, 1]"},
	{"tenants.max_predicted_ttft", "tenants: [{name: t, max_predicted_ttft: -1s}]\nspillover: {enabled: true}\n", "tenants[0].max_predicted_ttft: must be >= 0"},
	{"tenants.max_predicted_ttft without spillover", "tenants: [{name: t, max_predicted_ttft: 1s}]\n", "tenants[0].max_predicted_ttft: needs spillover.enabled: true"},
	{"tenants.models", "tenants: [{name: t, models: [nope]}]\n", `tenants[0].models[0]: "nope" is neither a served model nor an alias`},
	{"spillover.kind", "spillover: {enabled: true, kind: bedrock}\n", `spillover.kind: "bedrock" is not one of dashscope, openai`},
	{"spillover.base_url", "spillover: {enabled: true, base_url: \"\"}\n", "spillover.base_url: is required"},
	{"spillover.region", "spillover: {enabled: true, region: tokyo}\n", `spillover.region: "tokyo" is not one of beijing, singapore, us`},
	{"spillover.price", "spillover: {enabled: true, price: {input_per_million: -1}}\n", `spillover.price.input_per_million: must be a number >= 0, got -1`},
	{"spillover.price.currency", "spillover: {enabled: true, price: {currency: \"US$\"}}\n", `spillover.price.currency: "US$" is not a currency of at most 8 letters (USD, CNY, ...)`},
	{"spillover.base_url scheme", "spillover: {enabled: true, kind: openai, base_url: \"api.example.com/v1\"}\n", "spillover.base_url:"},
	{"spillover.on", "spillover: {enabled: true, on: [sometimes]}\n", `spillover.on[0]: "sometimes" is not one of saturated, failed`},
	{"spillover.max_predicted_ttft", "spillover: {enabled: true, max_predicted_ttft: -1s}\n", "spillover.max_predicted_ttft: must be >= 0"},
	{"spillover.max_predicted_ttft without spillover", "spillover: {enabled: false, max_predicted_ttft: 1s}\n", "spillover.max_predicted_ttft: needs spillover.enabled: true"},
	{"spillover.max_predicted_ttft_models", "spillover: {enabled: true, max_predicted_ttft_models: {m: -2s}}\n", "spillover.max_predicted_ttft_models.m: must be >= 0"},
	{"spillover.max_predicted_ttft_models unserved", "spillover: {enabled: true, max_predicted_ttft_models: {nope: 1s}}\n", `spillover.max_predicted_ttft_models.nope: "nope" is served by no node`},
	{"spillover.rpm", "spillover: {enabled: true, rpm: -1}\n", "spillover: rpm and tpm must be >= 0"},
	{"spillover.responses_url", "spillover: {enabled: true, responses_url: \"ftp://example.com/v1/responses\"}\n", "spillover.responses_url: must be an http:// or https:// URL"},
	{"spillover.responses_url host", "spillover: {enabled: true, responses_url: \"https://other.example.com/v1/responses\"}\n", "spillover.responses_url: must be on base_url's scheme and host"},
	{"models.name", "models: [{targets: [{model: m, weight: 1}]}]\n", "models[0].name: is required"},
	{"models.targets", "models: [{name: x}]\n", "models[0].targets: list at least one target"},
	{"models.targets weight", "models: [{name: x, targets: [{model: m, weight: -1}]}]\n", "models[0].targets[0]: needs a model and a weight >= 0"},
	{"models.targets no positive weight", "models: [{name: x, targets: [{model: m, weight: 0}]}]\n", "models[0].targets: at least one weight must be > 0"},
	{"models.targets served", "models: [{name: x, targets: [{model: nope, weight: 1}]}]\n", `models[0].targets[0].model: "nope" is served by no node`},
	{"warm.hot_entries", "warm: {hot_entries: -1}\n", "warm.hot_entries: must be >= 0"},
	{"warm.tag", "warm: {tag: \"a b\"}\n", "warm.tag: 1 to 128 letters"},
	{"warm.concurrency", "warm: {concurrency: 0}\n", "warm.concurrency: must be >= 1"},
	{"responses.remember_ids", "responses: {remember_ids: -1}\n", "responses.remember_ids: must be between 0 and 10000000"},
	{"responses.remember_for", "responses: {remember_for: 0s}\n", "responses.remember_for: must be > 0"},
	// Sections other packages validate.
	{"nodes.name", "listen: 127.0.0.1:0\nnodes: [{name: \"a b\", url: http://127.0.0.1:1, models: [m]}]\n", `nodes[0].name: "a b" may only use`},
	{"nodes.name twice", "listen: 127.0.0.1:0\nnodes: [{name: a, url: http://127.0.0.1:1, models: [m]}, {name: a, url: http://127.0.0.1:2, models: [m]}]\n", `nodes[1].name: "a" is used twice`},
	{"nodes.url", "listen: 127.0.0.1:0\nnodes: [{name: a, url: \"127.0.0.1:1\", models: [m]}]\n", "nodes[0].url: missing scheme"},
	{"nodes.kind", "listen: 127.0.0.1:0\nnodes: [{name: a, url: http://127.0.0.1:1, models: [m], kind: triton}]\n", `nodes[0].kind: "triton" is not one of`},
	{"nodes.models", "listen: 127.0.0.1:0\nnodes: [{name: a, url: http://127.0.0.1:1}]\n", "nodes[0].models: list at least one model"},
	{"nodes.max_concurrency", "listen: 127.0.0.1:0\nnodes: [{name: a, url: http://127.0.0.1:1, models: [m], max_concurrency: -1}]\n", "nodes[0].max_concurrency: must be >= 1"},
	{"balancer.policy", "balancer: {policy: fastest}\n", `balancer.policy: "fastest" is not one of`},
	{"balancer.retries", "balancer: {retries: 11}\n", "balancer.retries: must be between 0 and 10"},
	{"balancer.breaker", "balancer: {breaker: {failures: 0}}\n", "balancer.breaker: failures and half_open_successes must be >= 1"},
	{"cache.backend", "cache: {backend: disk}\n", `cache.backend: "disk" is not one of memory, redis, off`},
	{"cache.ttl", "cache: {ttl: 0s}\n", "cache.ttl: must be > 0"},
	{"cache.local_index", "cache: {local_index: {list_size: 2}}\n", "cache.local_index.list_size must be within"},
	{"cache.semantic.threshold", "cache: {semantic: {threshold: 1.5}}\n", "cache.semantic.threshold: must be in (0, 1]"},
	{"cache.semantic.guards.max_length_ratio", "cache: {semantic: {guards: {max_length_ratio: 0.5}}}\n", "cache.semantic.guards.max_length_ratio: must be >= 1"},
	{"cache.semantic.verify", "cache: {semantic: {verify: {audit_rate: 2}}}\n", "cache.semantic.verify.audit_rate: must be between 0 and 1"},
	{"cache.embedder", "cache: {semantic: {enabled: true}, embedder: {kind: word2vec}}\n", "cache.embedder.kind:"},
	{"cache.eligibility", "cache: {eligibility: {max_temperature: 3}}\n", "cache.eligibility.max_temperature: must be between 0 and 2"},
	{"cache.stream_replay", "cache: {stream_replay: {chunk_tokens: 0}}\n", "cache.stream_replay.chunk_tokens: must be >= 1"},
	{"tracing", "tracing: {enabled: true, sample_ratio: 2}\n", "tracing.sample_ratio:"},
	// Decoding: unknown keys, wrong types, syntax.
	{"unknown key", "cache: {tll: 1s}\n", "cache.tll: unknown key \"tll\" (did you mean `ttl`?)"},
	{"wrong type", "balancer: {retries: many}\n", `balancer.retries: "many" is not an integer`},
	{"removed key", "cache: {local_index: {ef_search: 3}}\n", `cache.local_index.ef_search: removed key "ef_search"`},
	{"syntax", "listen: 127.0.0.1:0\nnodes:\n  - name: a\n    url: http://127.0.0.1:1\n   models: [m]\n", "line 5:"},
	// The environment, read as serve reads it.
	{"admin token", "admin: {token_env: FD_TEST_WEAK_TOKEN}\n", "FD_TEST_WEAK_TOKEN"},
	{"tracing exporter", "tracing: {enabled: true}\n", "tracing: OTEL_EXPORTER_OTLP_TRACES_PROTOCOL: \"grpc\" is not supported"},
}

// check-config rejects every config serve rejects, with the same
// problems: each bad config fails both, and the problems check-config
// lists are exactly those serve exits with.
func TestCheckConfigRejectsWhatServeRejects(t *testing.T) {
	t.Setenv("FD_TEST_WEAK_TOKEN", "change-me")
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "grpc")
	dir := t.TempDir()
	canceled, cancel := context.WithCancel(context.Background())
	cancel() // serve stops at once if it starts: only a refusal is an error
	for i, tc := range badConfigs {
		t.Run(tc.name, func(t *testing.T) {
			body := tc.body
			if !strings.Contains(body, "nodes:") {
				body = validBase + body
			}
			path := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "_")+".yaml")
			if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
				t.Fatal(err)
			}
			var out, checkErr, serveErr bytes.Buffer
			checkCode := run([]string{"check-config", "--config", path}, &out, &checkErr)
			serveCode := serveFile(canceled, path, &serveErr)
			if serveCode != 1 {
				t.Fatalf("case %d: serve exit %d, want 1 (the case tests nothing):\n%s", i, serveCode, serveErr.String())
			}
			if checkCode != 1 {
				t.Fatalf("check-config exit %d but serve refused it:\n%s", checkCode, serveErr.String())
			}
			checked := problemLines(t, checkErr.String(), path+": ")
			served := problemLines(t, serveErr.String(), "invalid config:")
			if !slices.Equal(checked, served) {
				t.Fatalf("check-config says\n%q\nserve says\n%q", checked, served)
			}
			if !slices.ContainsFunc(checked, func(p string) bool { return strings.Contains(p, tc.want) }) {
				t.Fatalf("want %q among\n%q", tc.want, checked)
			}
		})
	}
}

// problemLines returns the indented problem lines that follow the header
// line starting with header; fails if there is no such header.
func problemLines(t *testing.T, out, header string) []string {
	t.Helper()
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	for i, l := range lines {
		if !strings.HasPrefix(l, header) {
			continue
		}
		var ps []string
		for _, p := range lines[i+1:] {
			if !strings.HasPrefix(p, "  ") {
				break
			}
			ps = append(ps, strings.TrimSpace(p))
		}
		return ps
	}
	t.Fatalf("no %q line in:\n%s", header, out)
	return nil
}

// A fault in the YAML's syntax is reported at the line it stands on.
func TestCheckConfigSyntaxErrorLine(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.yaml")
	for _, tc := range []struct{ doc, want string }{
		// An item's key indented one space less than its siblings.
		{"listen: 127.0.0.1:0\nnodes:\n  - name: a\n    url: http://127.0.0.1:1\n   models: [m]\n", "line 5:"},
		{"listen: 127.0.0.1:0\ncache:\n  ttl: 1h\n   max_ttl: 2h\n", "line 4:"},
		{"listen: 127.0.0.1:0\nnodes:\n  - name: a\n  url: x\n", "line 4:"},
		{"listen: 127.0.0.1:0\n\tnodes: []\n", "line 2:"},
		{"listen: [127.0.0.1:0\n", "line 1:"},
	} {
		if err := os.WriteFile(path, []byte(tc.doc), 0o600); err != nil {
			t.Fatal(err)
		}
		var out, errOut bytes.Buffer
		if code := run([]string{"check-config", "--config", path}, &out, &errOut); code != 1 || !strings.Contains(errOut.String(), tc.want) {
			t.Errorf("%q: exit %d, want %q in:\n%s", tc.doc, code, tc.want, errOut.String())
		}
	}
}

// Every key router/config/validate.go reports a problem under has a case
// in badConfigs, so that a new check cannot skip the walk above.
func TestBadConfigsCoverEveryCheck(t *testing.T) {
	src, err := os.ReadFile("../../router/config/validate.go")
	if err != nil {
		t.Fatal(err)
	}
	keys := regexp.MustCompile(`ps\.add\((?:fmt\.Sprintf\()?"([a-z0-9_]+)|add\("([a-z0-9_.]+):`).FindAllSubmatch(src, -1)
	if len(keys) < 20 {
		t.Fatalf("found %d checks: the pattern no longer matches the source", len(keys))
	}
	for _, k := range keys {
		key := string(k[1]) + string(k[2])
		named := regexp.MustCompile(`(^|\.)` + regexp.QuoteMeta(key) + `[:\[.]`) // the key itself, not a longer one ending in it
		if !slices.ContainsFunc(badConfigs, func(c struct{ name, body, want string }) bool {
			return named.MatchString(c.want)
		}) {
			t.Errorf("no bad config exercises the check of %q", key)
		}
	}
}

// check-config's summary counts in words: "1 node", "0 tenants".
func TestCheckConfigSummary(t *testing.T) {
	path := filepath.Join(t.TempDir(), "one.yaml")
	if err := os.WriteFile(path, []byte(validBase), 0o600); err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	if code := run([]string{"check-config", "--config", path}, &out, &errOut); code != 0 || !strings.Contains(out.String(), ": ok (1 node, 0 tenants, cache ") {
		t.Errorf("exit %d: %s%s", code, out.String(), errOut.String())
	}
}

// The starter config passes --strict as shipped, with no variable set, and
// an unset admin token is no warning unless the config names its own
// variable for it.
func TestStarterConfigNeedsNoSetup(t *testing.T) {
	for _, name := range []string{"FRONTDOOR_ADMIN_TOKEN", "FD_TEST_OWN_ADMIN_TOKEN"} {
		t.Setenv(name, "")
		os.Unsetenv(name)
	}
	var out, errOut bytes.Buffer
	if code := run([]string{"check-config", "--strict", "--config", "../../deploy/examples/minimal.yaml"}, &out, &errOut); code != 0 || errOut.Len() != 0 {
		t.Fatalf("minimal.yaml: exit %d: %s%s", code, out.String(), errOut.String())
	}
	own := filepath.Join(t.TempDir(), "own.yaml")
	if err := os.WriteFile(own, []byte(validBase+"admin: {token_env: FD_TEST_OWN_ADMIN_TOKEN}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	errOut.Reset()
	if code := run([]string{"check-config", "--config", own}, &out, &errOut); code != 0 || !strings.Contains(errOut.String(), "warning: admin.token_env: environment variable FD_TEST_OWN_ADMIN_TOKEN is not set") {
		t.Fatalf("a config naming its own token variable: exit %d: %s", code, errOut.String())
	}
}
