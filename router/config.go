package router

import (
	"fmt"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"frontdoor/adapters"
	"frontdoor/balancer"
	"frontdoor/cache"
	"frontdoor/internal/confyaml"
	"frontdoor/internal/redisconn"
	"frontdoor/internal/units"
)

// Limits is the limits: section.
type Limits struct {
	MaxBodyBytes units.Bytes `yaml:"max_body_bytes"`
	// MaxUpstreamBodyBytes bounds a node's answer read whole (every
	// non-streaming answer is); past it the answer is a 502, unread.
	MaxUpstreamBodyBytes units.Bytes `yaml:"max_upstream_body_bytes"`
}

// The range of limits.max_upstream_body_bytes: below 64 KiB ordinary
// answers would be refused; past 1 GiB one answer could take the
// process's memory.
const (
	minUpstreamBody units.Bytes = 64 << 10
	maxUpstreamBody units.Bytes = 1 << 30
)

// Server is the server: section. Its keys (engine, loops, io_uring) chose
// the event-loop engine, which is gone; they are read only so that
// Problems can say so.
type Server struct {
	removed []string
}

// UnmarshalYAML records the removed keys present; any other key is unknown.
func (s *Server) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.MappingNode {
		return fmt.Errorf("line %d: server: must be a mapping", n.Line)
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		switch k := n.Content[i]; k.Value {
		case "engine", "loops", "io_uring":
			s.removed = append(s.removed, k.Value)
		default:
			return &yaml.TypeError{Errors: []string{fmt.Sprintf("line %d: field %s not found in type router.Server", k.Line, k.Value)}}
		}
	}
	return nil
}

// Timeouts is the timeouts: section.
type Timeouts struct {
	Connect   units.Duration `yaml:"connect"`
	FirstByte units.Duration `yaml:"first_byte"`
	Idle      units.Duration `yaml:"idle"`
	Total     units.Duration `yaml:"total"`
	// Shutdown moved to shutdown.grace; read only so Problems can say so.
	Shutdown units.Duration `yaml:"shutdown"`
	// Client bounds the wait for a client's request: its bytes once it
	// has begun, and the next one on a kept-alive connection.
	Client units.Duration `yaml:"client"`
}

// Shutdown is the shutdown: section: what SIGTERM (or SIGINT) does.
type Shutdown struct {
	// DrainDelay: /readyz answers 503 at once and requests are still
	// served this long, while load balancers notice.
	DrainDelay units.Duration `yaml:"drain_delay"`
	// Grace: then the listener closes and requests and streams in flight
	// have this long to finish; the rest are cut.
	Grace units.Duration `yaml:"grace"`
}

// Admin is the admin: section. Admin endpoints (/admin/*, /status,
// /dashboard, /debug/pprof/) on the main listener need the token; the
// admin listener trusts whoever reaches it; allow_cidrs (empty by default)
// trusts peers by address on the main listener.
type Admin struct {
	TokenEnv string `yaml:"token_env"`
	// Listen is the admin listener's address ("": none): every route of
	// the main listener, each request trusted as an admin. Bind it to
	// loopback.
	Listen     string   `yaml:"listen"`
	AllowCIDRs []string `yaml:"allow_cidrs"`
	// ShowCachedQuestions lets GET /admin/cache/{id} show an entry's
	// question and answer (logging.log_prompts does too).
	ShowCachedQuestions bool `yaml:"show_cached_questions"`
}

// Logging is the logging: section.
type Logging struct {
	Level      string `yaml:"level"`  // debug | info | warn | error
	Format     string `yaml:"format"` // json | text
	AccessLog  bool   `yaml:"access_log"`
	LogPrompts bool   `yaml:"log_prompts"`
	// FlushInterval batches log lines (see LogBuffer); 0 writes each line
	// as it comes.
	FlushInterval units.Duration `yaml:"flush_interval"`
}

// GlobalLimits is admission.global.
type GlobalLimits struct {
	RPS             float64 `yaml:"rps"`
	Burst           int     `yaml:"burst"`
	TokensPerMinute int     `yaml:"tokens_per_minute"`
}

// Admission is the admission: section.
type Admission struct {
	Backend          string         `yaml:"backend"` // local | redis
	Global           GlobalLimits   `yaml:"global"`
	MaxWait          units.Duration `yaml:"max_wait"`
	DefaultMaxTokens int            `yaml:"default_max_tokens"` // charged up front when a request sets none
	Replicas         int            `yaml:"replicas"`           // known replica count, for the Redis-down fallback
}

// Auth is the auth: section.
type Auth struct {
	Required bool `yaml:"required"`
}

// Tenant is one entry of tenants:.
type Tenant struct {
	Name                string   `yaml:"name"`
	APIKeysEnv          string   `yaml:"api_keys_env"`
	APIKeySHA256        []string `yaml:"api_key_sha256"`
	RPS                 float64  `yaml:"rps"`
	Burst               int      `yaml:"burst"`
	TokensPerMinute     int      `yaml:"tokens_per_minute"`
	MaxConcurrency      int      `yaml:"max_concurrency"`
	Models              []string `yaml:"models"`
	CacheNamespace      string   `yaml:"cache_namespace"`
	Spillover           *bool    `yaml:"spillover"`
	AllowCacheThreshold bool     `yaml:"allow_cache_threshold"` // may send X-Cache-Threshold
	// CacheThreshold and CacheModelThresholds override
	// cache.semantic.threshold and .model_thresholds for this tenant
	// (0 / absent: the cache's).
	CacheThreshold       float64            `yaml:"cache_threshold"`
	CacheModelThresholds map[string]float64 `yaml:"cache_model_thresholds"`
}

// Spillover is the spillover: section.
type Spillover struct {
	Enabled   bool              `yaml:"enabled"`
	Kind      string            `yaml:"kind"` // dashscope | openai
	BaseURL   string            `yaml:"base_url"`
	Region    string            `yaml:"region"` // beijing | singapore | us (dashscope, when base_url is empty)
	APIKeyEnv string            `yaml:"api_key_env"`
	ModelMap  map[string]string `yaml:"model_map"`
	On        []string          `yaml:"on"` // saturated | failed
	RPM       int               `yaml:"rpm"`
	TPM       int               `yaml:"tpm"`
}

// Warm is the warm: section.
type Warm struct {
	Files       []string `yaml:"files"`
	Concurrency int      `yaml:"concurrency"`
	// Model is the model of plain-text prompts and of requests without one.
	Model string `yaml:"model"`
	// Tag tags the entries warm.files store ("": the file's base name).
	Tag string `yaml:"tag"`
	// HotEntries is how many entries' hits are counted for
	// GET /admin/cache/hot (0: none).
	HotEntries int `yaml:"hot_entries"`
}

// Config is the whole frontdoor configuration file.
type Config struct {
	Listen    string                `yaml:"listen"`
	Server    Server                `yaml:"server"`
	Limits    Limits                `yaml:"limits"`
	Timeouts  Timeouts              `yaml:"timeouts"`
	Admin     Admin                 `yaml:"admin"`
	Logging   Logging               `yaml:"logging"`
	Redis     redisconn.Config      `yaml:"redis"`
	Cache     cache.Config          `yaml:"cache"`
	Admission Admission             `yaml:"admission"`
	Auth      Auth                  `yaml:"auth"`
	Tenants   []Tenant              `yaml:"tenants"`
	Nodes     []balancer.NodeConfig `yaml:"nodes"`
	Balancer  balancer.Config       `yaml:"balancer"`
	Spillover Spillover             `yaml:"spillover"`
	Models    []balancer.ModelAlias `yaml:"models"`
	Warm      Warm                  `yaml:"warm"`
	Tracing   Tracing               `yaml:"tracing"`
	Shutdown  Shutdown              `yaml:"shutdown"`
}

// DefaultConfig returns the defaults of every key.
func DefaultConfig() Config {
	return Config{
		Listen:    ":8080",
		Limits:    Limits{MaxBodyBytes: 8 << 20, MaxUpstreamBodyBytes: adapters.DefaultMaxBody},
		Timeouts:  Timeouts{Connect: units.Duration(2e9), FirstByte: units.Duration(60e9), Idle: units.Duration(30e9), Total: units.Duration(600e9), Client: units.Duration(120e9)},
		Admin:     Admin{TokenEnv: "FRONTDOOR_ADMIN_TOKEN"},
		Logging:   Logging{Level: "info", Format: "json", AccessLog: true, FlushInterval: units.Duration(100 * time.Millisecond)},
		Redis:     redisconn.DefaultConfig(),
		Cache:     cache.DefaultConfig(),
		Admission: Admission{Backend: "local", DefaultMaxTokens: 1024, Replicas: 1},
		Balancer:  balancer.DefaultConfig(),
		Spillover: Spillover{Kind: "dashscope", BaseURL: "https://dashscope.aliyuncs.com/compatible-mode/v1", APIKeyEnv: "DASHSCOPE_API_KEY", On: []string{"saturated", "failed"}},
		Warm:      Warm{Concurrency: 5, HotEntries: 10000},
		Tracing:   Tracing{SampleRatio: 1, ServiceName: "frontdoor"},
		Shutdown:  Shutdown{Grace: units.Duration(30e9)},
	}
}

// Load reads and validates a config file. Unknown keys are errors.
func Load(path string) (Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Config{}, fmt.Errorf("read config: %w", err)
	}
	return Parse(data)
}

// Parse decodes YAML over the defaults and validates the result. Every
// problem is reported, each prefixed with its YAML path.
func Parse(data []byte) (Config, error) {
	cfg := DefaultConfig()
	problems, complete := confyaml.Decode(data, &cfg, removedKeys)
	if !complete {
		return cfg, &ConfigError{Problems: problems} // not decoded: nothing more to check
	}
	// On a type error yaml.v3 decoded the rest: its other problems are
	// worth listing too, all at once.
	for i := range cfg.Nodes {
		balancer.DefaultNode(&cfg.Nodes[i])
	}
	if problems = append(problems, cfg.Problems()...); len(problems) > 0 {
		return cfg, &ConfigError{Problems: problems}
	}
	return cfg, nil
}

// ConfigError lists every problem found in a config.
type ConfigError struct{ Problems []string }

func (e *ConfigError) Error() string {
	return "invalid config:\n  " + strings.Join(e.Problems, "\n  ")
}

// removedKeys says, for keys earlier versions accepted, what replaced them.
var removedKeys = map[string]string{
	"cache.local_index.m":               localIndexMoved,
	"cache.local_index.ef_construction": localIndexMoved,
	"cache.local_index.ef_search":       localIndexMoved,
}

const localIndexMoved = "the in-process index is an inverted file now, not a graph; its settings are list_size, probes and rerank (docs/config.md)"

// Problems validates the whole config and returns every problem found,
// each prefixed with its YAML path.
func (c *Config) Problems() []string {
	var out []string
	add := func(format string, a ...any) { out = append(out, fmt.Sprintf(format, a...)) }
	section := func(prefix string, err error) {
		if err == nil {
			return
		}
		for _, line := range strings.Split(err.Error(), "\n") {
			out = append(out, prefix+"."+line)
		}
	}
	if c.Listen == "" {
		add("listen: is required")
	} else if err := checkListen(c.Listen); err != nil {
		add("listen: %v", err)
	}
	for _, k := range c.Server.removed {
		add("server.%s: removed in this version: frontdoor has one HTTP server (fasthttp); delete the key", k)
	}
	if c.Limits.MaxBodyBytes < 1024 {
		add("limits.max_body_bytes: must be at least 1024")
	}
	if v := c.Limits.MaxUpstreamBodyBytes; v < minUpstreamBody || v > maxUpstreamBody {
		add("limits.max_upstream_body_bytes: must be between 64KiB and 1GiB (a node's whole answer, held in memory while it is read)")
	}
	if c.Timeouts.Connect <= 0 || c.Timeouts.FirstByte <= 0 || c.Timeouts.Idle <= 0 || c.Timeouts.Total <= 0 {
		add("timeouts: connect, first_byte, idle and total must all be > 0")
	}
	if c.Timeouts.Shutdown != 0 {
		add("timeouts.shutdown: moved to shutdown.grace (with shutdown.drain_delay before it); rename the key")
	}
	if c.Shutdown.DrainDelay < 0 || c.Shutdown.Grace < 0 {
		add("shutdown: drain_delay and grace must be >= 0")
	}
	if c.Timeouts.Client <= 0 {
		add("timeouts.client: must be > 0")
	}
	if c.Admin.Listen != "" {
		if err := checkListen(c.Admin.Listen); err != nil {
			add("admin.listen: %v", err)
		} else if c.Admin.Listen == c.Listen && !strings.HasSuffix(c.Listen, ":0") {
			add("admin.listen: must differ from listen (%s): the admin listener trusts every request on it", c.Listen)
		}
	}
	for i, cidr := range c.Admin.AllowCIDRs {
		if _, err := parseCIDR(cidr); err != nil {
			add("admin.allow_cidrs[%d]: %v", i, err)
		}
	}
	switch c.Logging.Level {
	case "debug", "info", "warn", "error":
	default:
		add("logging.level: %q is not one of debug, info, warn, error", c.Logging.Level)
	}
	switch c.Logging.Format {
	case "json", "text":
	default:
		add("logging.format: %q is not one of json, text", c.Logging.Format)
	}
	if d := c.Logging.FlushInterval.D(); d < 0 || d > time.Minute {
		add("logging.flush_interval: must be between 0s and 1m")
	}
	usesRedis := c.Cache.Backend == "redis" || c.Admission.Backend == "redis"
	if usesRedis {
		section("redis", c.Redis.Validate())
	}
	section("cache", c.Cache.Validate())
	switch c.Admission.Backend {
	case "local", "redis":
	default:
		add("admission.backend: %q is not one of local, redis", c.Admission.Backend)
	}
	if c.Admission.Global.RPS < 0 || c.Admission.Global.Burst < 0 || c.Admission.Global.TokensPerMinute < 0 {
		add("admission.global: rps, burst and tokens_per_minute must be >= 0")
	}
	if c.Admission.MaxWait < 0 {
		add("admission.max_wait: must be >= 0")
	}
	if c.Admission.Replicas < 1 {
		add("admission.replicas: must be >= 1")
	}
	tenantNames := map[string]bool{}
	for i, t := range c.Tenants {
		p := fmt.Sprintf("tenants[%d]", i)
		if t.Name == "" {
			add("%s.name: is required", p)
		} else if tenantNames[t.Name] {
			add("%s.name: %q is used twice", p, t.Name)
		}
		tenantNames[t.Name] = true
		for j, h := range t.APIKeySHA256 {
			if len(h) != 64 || strings.Trim(strings.ToLower(h), "0123456789abcdef") != "" {
				add("%s.api_key_sha256[%d]: must be 64 hex digits", p, j)
			}
		}
		if t.RPS < 0 || t.Burst < 0 || t.TokensPerMinute < 0 || t.MaxConcurrency < 0 {
			add("%s: rps, burst, tokens_per_minute and max_concurrency must be >= 0", p)
		}
		if t.CacheThreshold < 0 || t.CacheThreshold > 1 {
			add("%s.cache_threshold: must be in (0, 1], or 0 for cache.semantic.threshold", p)
		}
		for m, v := range t.CacheModelThresholds {
			if v <= 0 || v > 1 {
				add("%s.cache_model_thresholds.%s: must be in (0, 1]", p, m)
			}
		}
	}
	nodeNames := map[string]bool{}
	for i := range c.Nodes {
		n := &c.Nodes[i]
		p := fmt.Sprintf("nodes[%d]", i)
		section(p, n.Validate())
		if n.Name != "" && nodeNames[n.Name] {
			add("%s.name: %q is used twice", p, n.Name)
		}
		nodeNames[n.Name] = true
	}
	section("balancer", c.Balancer.Validate())
	out = append(out, c.selfNodeProblems()...)
	if c.Spillover.Enabled {
		switch c.Spillover.Kind {
		case "dashscope", "openai":
		default:
			add("spillover.kind: %q is not one of dashscope, openai", c.Spillover.Kind)
		}
		if c.Spillover.BaseURL == "" && c.Spillover.Region == "" {
			add("spillover.base_url: is required")
		}
		for i, on := range c.Spillover.On {
			if on != "saturated" && on != "failed" {
				add("spillover.on[%d]: %q is not one of saturated, failed", i, on)
			}
		}
		if c.Spillover.RPM < 0 || c.Spillover.TPM < 0 {
			add("spillover: rpm and tpm must be >= 0")
		}
	}
	if len(c.Nodes) == 0 && !c.Spillover.Enabled {
		add("nodes: configure at least one node (or enable spillover)")
	}
	for i, m := range c.Models {
		p := fmt.Sprintf("models[%d]", i)
		if m.Name == "" {
			add("%s.name: is required", p)
		}
		if len(m.Targets) == 0 {
			add("%s.targets: list at least one target", p)
		}
		for j, t := range m.Targets {
			if t.Model == "" || t.Weight < 0 {
				add("%s.targets[%d]: needs a model and a weight >= 0", p, j)
			}
		}
	}
	if c.Warm.HotEntries < 0 {
		add("warm.hot_entries: must be >= 0")
	}
	if c.Warm.Tag != "" && validTag([]byte(c.Warm.Tag)) == "" {
		add("warm.tag: 1 to 128 letters, digits or ._:/@+-")
	}
	if c.Warm.Concurrency < 1 {
		add("warm.concurrency: must be >= 1")
	}
	section("tracing", c.Tracing.Validate())
	out = append(out, c.modelProblems()...)
	return out
}

// checkListen reports whether addr is a host:port net.Listen takes.
func checkListen(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		if _, perr := strconv.Atoi(addr); perr == nil {
			return fmt.Errorf("%q has no host part: write %q to listen on every interface", addr, ":"+addr)
		}
		return fmt.Errorf("%q is not host:port: %w", addr, err)
	}
	if p, err := strconv.Atoi(port); err != nil || p < 0 || p > 65535 {
		return fmt.Errorf("%q: port %q is not a number from 0 to 65535", addr, port)
	}
	if strings.ContainsAny(host, " /") {
		return fmt.Errorf("%q: %q is not a host", addr, host)
	}
	return nil
}

// modelProblems checks the names that meet at run time: every alias or
// canary target is served by a node or by spill-over's model_map (else the
// share of requests it gets is a 503 that no retry helps), and every
// model a tenant may use exists.
func (c *Config) modelProblems() []string {
	var out []string
	served := map[string]bool{}
	for _, n := range c.Nodes {
		for _, m := range n.Models {
			served[m] = true
		}
	}
	spilled := map[string]bool{}
	if c.Spillover.Enabled {
		for m := range c.Spillover.ModelMap {
			spilled[m] = true
		}
	}
	aliases := map[string]bool{}
	for _, m := range c.Models {
		aliases[m.Name] = true
	}
	known := func() string {
		var names []string
		for m := range served {
			names = append(names, m)
		}
		for m := range spilled {
			if !served[m] {
				names = append(names, m)
			}
		}
		slices.Sort(names)
		return strings.Join(names, ", ")
	}
	for i, m := range c.Models {
		for j, t := range m.Targets {
			if t.Model == "" || served[t.Model] || spilled[t.Model] {
				continue
			}
			msg := fmt.Sprintf("models[%d].targets[%d].model: %q is served by no node", i, j, t.Model)
			if c.Spillover.Enabled {
				msg += " and is not in spillover.model_map"
			}
			out = append(out, msg+"; served: "+known())
		}
	}
	for i, t := range c.Tenants {
		for j, m := range t.Models {
			if m == "*" || served[m] || spilled[m] || aliases[m] {
				continue
			}
			out = append(out, fmt.Sprintf("tenants[%d].models[%d]: %q is neither a served model nor an alias; served: %s", i, j, m, known()))
		}
	}
	return out
}

// EnvRef is an environment variable the config names (a *_env key).
type EnvRef struct {
	Path string // the YAML path of the key, e.g. nodes[0].api_key_env
	Name string
}

// EnvVars lists the environment variables the config names in the
// sections in use: those that are unset at run time mean a missing key.
func (c *Config) EnvVars() []EnvRef {
	var out []EnvRef
	add := func(path, name string) {
		if name != "" {
			out = append(out, EnvRef{path, name})
		}
	}
	add("admin.token_env", c.Admin.TokenEnv)
	if c.Cache.Backend == "redis" || c.Admission.Backend == "redis" {
		add("redis.password_env", c.Redis.PasswordEnv)
	}
	if c.Cache.Backend != "off" && c.Cache.Semantic.Enabled && c.Cache.Embedder.Kind != "local" {
		add("cache.embedder.api_key_env", c.Cache.Embedder.APIKeyEnv)
	}
	for i, t := range c.Tenants {
		add(fmt.Sprintf("tenants[%d].api_keys_env", i), t.APIKeysEnv)
	}
	for i, n := range c.Nodes {
		add(fmt.Sprintf("nodes[%d].api_key_env", i), n.APIKeyEnv)
	}
	if c.Spillover.Enabled {
		add("spillover.api_key_env", c.Spillover.APIKeyEnv)
	}
	return out
}
