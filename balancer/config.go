package balancer

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"

	"frontdoor/internal/redact"
	"frontdoor/internal/units"
)

// NodeConfig is one entry of nodes:.
type NodeConfig struct {
	Name           string   `yaml:"name"`
	URL            string   `yaml:"url"`
	Kind           string   `yaml:"kind"` // vllm | tgi | sglang | openai
	Models         []string `yaml:"models"`
	MaxConcurrency int      `yaml:"max_concurrency"`
	Weight         float64  `yaml:"weight"`
	APIKeyEnv      string   `yaml:"api_key_env"`
	MaxModelLen    int      `yaml:"max_model_len"` // 0 = unknown
	MetricsURL     string   `yaml:"metrics_url"`   // default: <server root>/metrics
	HealthURL      string   `yaml:"health_url"`    // default: <server root>/health
	// Discover "dns" makes the entry a template: its URL's host is
	// resolved every discover_interval and each A/AAAA record becomes a
	// node named <name>-<address>, with the entry's settings.
	Discover         string         `yaml:"discover"`
	DiscoverInterval units.Duration `yaml:"discover_interval"` // default 10s
	// DiscoverAllow lets discovery make nodes of address classes it drops
	// by default: "loopback" (127.0.0.0/8, ::1) and "link_local"
	// (169.254.0.0/16, fe80::/10). Unspecified, multicast and cloud
	// metadata addresses, and the gateway's own address, are always dropped.
	DiscoverAllow []string `yaml:"discover_allow"`
	// DiscoverMaxNodes caps the nodes one lookup makes (default 256): the
	// addresses are sorted and the first ones kept.
	DiscoverMaxNodes int `yaml:"discover_max_nodes"`
}

// Address classes discover_allow may name.
const (
	AllowLoopback  = "loopback"
	AllowLinkLocal = "link_local"
)

// DefaultDiscoverMaxNodes is discover_max_nodes' default.
const DefaultDiscoverMaxNodes = 256

// Weights are the scorer weights.
type Weights struct {
	Queue    float64 `yaml:"queue"`
	Latency  float64 `yaml:"latency"`
	Memory   float64 `yaml:"memory"`
	Affinity float64 `yaml:"affinity"`
	Prefix   float64 `yaml:"prefix"`
}

// PrefixConfig tunes the prefix scorer (weights.prefix).
type PrefixConfig struct {
	BlockTokens    int     `yaml:"block_tokens"`    // a prefix hash every this many (estimated) tokens, and at each message's end
	CapacityTokens int     `yaml:"capacity_tokens"` // a node's KV capacity when it publishes none (vLLM's cache_config_info)
	BalanceAbs     float64 `yaml:"balance_abs"`     // load guard: the node's load exceeds the least loaded candidate's by more than this...
	BalanceRel     float64 `yaml:"balance_rel"`     // ...and is more than this many times it: its prefix scores 0
}

// Backoff is the retry backoff.
type Backoff struct {
	Base units.Duration `yaml:"base"`
	Max  units.Duration `yaml:"max"`
}

// EjectConfig sets ejection with hysteresis.
type EjectConfig struct {
	KVUsageAbove float64        `yaml:"kv_usage_above"`
	QueueAbove   float64        `yaml:"queue_above"`
	After        int            `yaml:"after"`
	RestoreAfter int            `yaml:"restore_after"`
	Cooldown     units.Duration `yaml:"cooldown"`
}

// BreakerConfig sets the per-node circuit breaker.
type BreakerConfig struct {
	Failures          int            `yaml:"failures"`
	Window            units.Duration `yaml:"window"`
	OpenFor           units.Duration `yaml:"open_for"`
	HalfOpenSuccesses int            `yaml:"half_open_successes"`
	HalfOpenProbes    int            `yaml:"half_open_probes"` // concurrent trial requests when half-open; 0 = 1
}

// QueueConfig sets waiting for a free node.
type QueueConfig struct {
	MaxWait units.Duration `yaml:"max_wait"`
}

// Config is the balancer: section.
type Config struct {
	Policy         string         `yaml:"policy"` // score | round_robin | least_inflight
	Weights        Weights        `yaml:"weights"`
	ScrapeInterval units.Duration `yaml:"scrape_interval"`
	StaleAfter     units.Duration `yaml:"stale_after"`
	HealthInterval units.Duration `yaml:"health_interval"`
	// HealthFailures is how many probes in a row must fail before an
	// active probe marks a node unhealthy: one slow answer on a busy
	// machine is not an outage.
	HealthFailures int           `yaml:"health_failures"`
	Retries        int           `yaml:"retries"`
	Backoff        Backoff       `yaml:"backoff"`
	Eject          EjectConfig   `yaml:"eject"`
	Breaker        BreakerConfig `yaml:"breaker"`
	Queue          QueueConfig   `yaml:"queue"`
	// DNSResolver is the DNS server ("host:port") that discover: dns
	// entries ask; empty: the system's resolver (/etc/resolv.conf).
	DNSResolver string       `yaml:"dns_resolver"`
	Prefix      PrefixConfig `yaml:"prefix"`
}

// ModelTarget is one weighted target of an alias.
type ModelTarget struct {
	Model  string  `yaml:"model"`
	Weight float64 `yaml:"weight"`
}

// ModelAlias is one entry of models:: a public name with weighted targets.
type ModelAlias struct {
	Name    string        `yaml:"name"`
	Targets []ModelTarget `yaml:"targets"`
}

// DefaultConfig returns the documented defaults.
func DefaultConfig() Config {
	return Config{
		Policy:         "score",
		Weights:        Weights{Queue: 0.5, Latency: 0.3, Memory: 0.2, Prefix: 3},
		ScrapeInterval: units.Duration(1e9),
		StaleAfter:     units.Duration(5e9),
		HealthInterval: units.Duration(5e9),
		HealthFailures: 2,
		Retries:        2,
		Backoff:        Backoff{Base: units.Duration(50e6), Max: units.Duration(1e9)},
		Eject:          EjectConfig{KVUsageAbove: 0.92, QueueAbove: 8, After: 2, RestoreAfter: 2, Cooldown: units.Duration(30e9)},
		Breaker:        BreakerConfig{Failures: 5, Window: units.Duration(10e9), OpenFor: units.Duration(10e9), HalfOpenSuccesses: 2, HalfOpenProbes: 1},
		Prefix:         PrefixConfig{BlockTokens: 64, CapacityTokens: 65536, BalanceAbs: 3, BalanceRel: 1.5},
	}
}

// DefaultNode fills a node's unset fields.
func DefaultNode(n *NodeConfig) {
	if n.Kind == "" {
		n.Kind = "vllm"
	}
	if n.MaxConcurrency == 0 {
		n.MaxConcurrency = 10
	}
	if n.Weight == 0 {
		n.Weight = 1
	}
	if n.Discover != "" && n.DiscoverInterval == 0 {
		n.DiscoverInterval = units.Duration(10e9)
	}
	if n.Discover != "" && n.DiscoverMaxNodes == 0 {
		n.DiscoverMaxNodes = DefaultDiscoverMaxNodes
	}
}

// Validate checks the section. Errors are prefixed with their YAML key.
func (c *Config) Validate() error {
	var errs []error
	add := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	switch c.Policy {
	case "score", "round_robin", "least_inflight":
	default:
		add("policy: %q is not one of score, round_robin, least_inflight", c.Policy)
	}
	for name, w := range map[string]float64{"queue": c.Weights.Queue, "latency": c.Weights.Latency, "memory": c.Weights.Memory, "affinity": c.Weights.Affinity, "prefix": c.Weights.Prefix} {
		if w < 0 {
			add("weights.%s: must be >= 0", name)
		}
	}
	if c.ScrapeInterval <= 0 {
		add("scrape_interval: must be > 0")
	}
	if c.StaleAfter < c.ScrapeInterval {
		add("stale_after: must be >= scrape_interval")
	}
	if c.HealthInterval <= 0 {
		add("health_interval: must be > 0")
	}
	if c.HealthFailures < 1 {
		add("health_failures: must be >= 1")
	}
	if c.Retries < 0 || c.Retries > 10 {
		add("retries: must be between 0 and 10")
	}
	if c.Backoff.Base < 0 || c.Backoff.Max < c.Backoff.Base {
		add("backoff: need 0 <= base <= max")
	}
	if c.Eject.KVUsageAbove <= 0 || c.Eject.KVUsageAbove > 1 {
		add("eject.kv_usage_above: must be in (0, 1]")
	}
	if c.Eject.QueueAbove < 0 {
		add("eject.queue_above: must be >= 0 (0 = off)")
	}
	if c.Eject.Cooldown < 0 {
		add("eject.cooldown: must be >= 0")
	}
	if c.Eject.After < 1 || c.Eject.RestoreAfter < 1 {
		add("eject: after and restore_after must be >= 1")
	}
	if c.Breaker.Failures < 1 || c.Breaker.HalfOpenSuccesses < 1 {
		add("breaker: failures and half_open_successes must be >= 1")
	}
	if c.Breaker.HalfOpenProbes < 0 {
		add("breaker.half_open_probes: must be >= 0")
	}
	if c.Breaker.Window <= 0 || c.Breaker.OpenFor <= 0 {
		add("breaker: window and open_for must be > 0")
	}
	if c.Prefix.BlockTokens < 1 || c.Prefix.BlockTokens > 4096 {
		add("prefix.block_tokens: must be between 1 and 4096")
	}
	if c.Prefix.CapacityTokens < 1 {
		add("prefix.capacity_tokens: must be >= 1")
	}
	if c.Prefix.BalanceAbs < 0 {
		add("prefix.balance_abs: must be >= 0")
	}
	if c.Prefix.BalanceRel < 1 {
		add("prefix.balance_rel: must be >= 1")
	}
	if c.Queue.MaxWait < 0 {
		add("queue.max_wait: must be >= 0")
	}
	if c.DNSResolver != "" {
		if _, _, err := net.SplitHostPort(c.DNSResolver); err != nil {
			add("dns_resolver: %q is not host:port", c.DNSResolver)
		}
	}
	return errors.Join(errs...)
}

// Validate checks one node. Errors are prefixed with the field's key.
func (n *NodeConfig) Validate() error {
	var errs []error
	add := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	if n.Name == "" {
		add("name: is required")
	} else if !validNodeName(n.Name) {
		add("name: %q may only use letters, digits, '.', '_', ':' and '-' (it is sent in the X-Upstream header and used as a metric label)", n.Name)
	}
	if n.URL == "" {
		add("url: is required")
	} else if !strings.Contains(n.URL, "://") {
		add("url: missing scheme (want http:// or https://)")
	} else if u, err := url.Parse(n.URL); err != nil {
		add("url: %v", redact.ParseError(err)) // a *url.Error quotes the URL, password included
	} else if u.Scheme != "http" && u.Scheme != "https" {
		add("url: missing scheme (want http:// or https://)")
	} else if u.Host == "" {
		add("url: missing host")
	}
	switch n.Kind {
	case "vllm", "tgi", "sglang", "openai":
	default:
		add("kind: %q is not one of vllm, tgi, sglang, openai", n.Kind)
	}
	if len(n.Models) == 0 {
		add("models: list at least one model")
	}
	for i, m := range n.Models {
		if strings.TrimSpace(m) == "" {
			add("models[%d]: is empty", i)
		}
	}
	if n.MaxConcurrency < 1 {
		add("max_concurrency: must be >= 1")
	}
	if n.Weight <= 0 {
		add("weight: must be > 0")
	}
	if n.MaxModelLen < 0 {
		add("max_model_len: must be >= 0")
	}
	switch n.Discover {
	case "":
	case "dns":
		if n.DiscoverInterval <= 0 {
			add("discover_interval: must be > 0")
		}
		if len(n.Name)+len("-ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff") > 128 {
			add("name: too long for discovered nodes (<name>-<address>)")
		}
		if n.DiscoverMaxNodes < 0 {
			add("discover_max_nodes: must be >= 1 (0 = %d)", DefaultDiscoverMaxNodes)
		}
		for i, a := range n.DiscoverAllow {
			switch a {
			case AllowLoopback, AllowLinkLocal:
			case dropUnspecified, dropMulticast, dropMetadata, dropSelf:
				add("discover_allow[%d]: %q addresses are never made nodes; allow loopback or link_local only", i, a)
			default:
				add("discover_allow[%d]: %q is not one of loopback, link_local", i, a)
			}
		}
	default:
		add("discover: %q is not one of dns (or leave it out)", n.Discover)
	}
	if n.Discover == "" && (len(n.DiscoverAllow) > 0 || n.DiscoverMaxNodes != 0) {
		add("discover_allow, discover_max_nodes: only apply to a discover: dns entry")
	}
	return errors.Join(errs...)
}

func validNodeName(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == ':' || c == '-') {
			return false
		}
	}
	return len(s) <= 128
}
