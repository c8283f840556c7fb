package config

import (
	"fmt"
	"os"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"frontdoor/adapters"
	"frontdoor/balancer"
	"frontdoor/cache"
	"frontdoor/internal/confyaml"
	"frontdoor/internal/redisconn"
	"frontdoor/internal/telemetry"
	"frontdoor/internal/units"
)

// Limits is the limits: section.
type Limits struct {
	MaxBodyBytes units.Bytes `yaml:"max_body_bytes"`
	// MaxUpstreamBodyBytes bounds a node's answer read whole (every
	// non-streaming answer is); past it the answer is a 502, unread.
	MaxUpstreamBodyBytes units.Bytes `yaml:"max_upstream_body_bytes"`
	// What one body may hold (adapters.BodyLimits): chat messages or
	// Responses input items, content parts of one message, items of one
	// token array. Past them the request is a 400 naming the array.
	MaxMessages     int `yaml:"max_messages"`
	MaxContentParts int `yaml:"max_content_parts"`
	MaxTokenIDs     int `yaml:"max_token_ids"`
	// ParseBudgetBytes is shared by the bodies parsed at once, each
	// charged its estimated memory (4 bytes per body byte, 128 per JSON
	// value) until its request ends. Past it a request waits up to
	// ParseWait, then is a 503; a body costing more than the whole
	// budget is a 413.
	ParseBudgetBytes units.Bytes    `yaml:"parse_budget_bytes"`
	ParseWait        units.Duration `yaml:"parse_wait"`
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
// Validate can say so.
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
	// Shutdown moved to shutdown.grace; read only so Validate can say so.
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
	// FlushInterval batches log lines (see telemetry.LogBuffer); 0 writes
	// each line as it comes.
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
	// MaxPredictedTTFT overrides spillover.max_predicted_ttft (and its
	// per-model values) for this tenant; 0: theirs.
	MaxPredictedTTFT units.Duration `yaml:"max_predicted_ttft"`
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
	// Price is the hosted API's price, for the dashboard's spill-over
	// cost; zero: none shown.
	Price SpillPrice `yaml:"price"`
	// Responses spills POST /v1/responses too (on by default); off, a
	// Responses request no node can take is answered 503.
	Responses bool `yaml:"responses"`
	// ResponsesURL is the hosted Responses API's URL, on base_url's
	// scheme and host; "": DashScope's /api/v2/apps/... path for a region
	// URL, else base_url + /responses.
	ResponsesURL string `yaml:"responses_url"`
	// MaxPredictedTTFT spills a request at once when every node with a
	// free slot is predicted (balancer's TTFT predictor, known
	// predictions only) to take longer than this to its first token;
	// 0: off. MaxPredictedTTFTModels sets it per served model (after
	// alias resolution); a tenant's max_predicted_ttft comes first, then
	// the model's, then this one.
	MaxPredictedTTFT       units.Duration            `yaml:"max_predicted_ttft"`
	MaxPredictedTTFTModels map[string]units.Duration `yaml:"max_predicted_ttft_models"`
}

// SpillPrice is spillover.price: per million tokens, in Currency.
type SpillPrice struct {
	InputPerMillion  float64 `yaml:"input_per_million"`
	OutputPerMillion float64 `yaml:"output_per_million"`
	Currency         string  `yaml:"currency"`
}

// ResponsesConfig is the responses: section: what the gateway remembers of
// the Responses API's responses it passed on, to send GET and DELETE
// /v1/responses/{id} and a follow-up's previous_response_id to the node
// that holds the response.
type ResponsesConfig struct {
	RememberIDs int            `yaml:"remember_ids"` // 0: none (GET and DELETE by id answer 404)
	RememberFor units.Duration `yaml:"remember_for"`
	// ForwardUnknownIDs sends a request naming server-side state that
	// frontdoor does not remember (an unknown previous_response_id, a
	// conversation, a prompt template, an item_reference) to a node
	// instead of answering 404. Off: no tenant's request can name another
	// tenant's state to a node. See docs/security.md.
	ForwardUnknownIDs bool `yaml:"forward_unknown_ids"`
}

// Tracing is the tracing: section (see telemetry.TracingConfig).
type Tracing = telemetry.TracingConfig

// Passthrough is the passthrough: section: the paths nodes serve that the
// gateway forwards without knowing them (/v1/rerank, /v1/score,
// /tokenize, /v1/audio/*), each opted in by name. A request to one is
// routed by its body's model to a node that lists the model, with the
// tenant's key and allow-list, admission by requests, retries on another
// node and metrics, but no cache.
type Passthrough struct {
	// Paths are exact paths, or prefixes written as /path/* (every path
	// below /path/).
	Paths []string `yaml:"paths"`
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
	Responses ResponsesConfig       `yaml:"responses"`
	Tracing   Tracing               `yaml:"tracing"`
	Shutdown  Shutdown              `yaml:"shutdown"`
	// Passthrough lists the other paths nodes serve that are forwarded
	// (none by default).
	Passthrough Passthrough `yaml:"passthrough"`
}

// DefaultConfig returns the defaults of every key.
func DefaultConfig() Config {
	return Config{
		Listen:    ":8080",
		Limits:    defaultLimits(),
		Timeouts:  Timeouts{Connect: units.Duration(2e9), FirstByte: units.Duration(60e9), Idle: units.Duration(30e9), Total: units.Duration(600e9), Client: units.Duration(120e9)},
		Admin:     Admin{TokenEnv: "FRONTDOOR_ADMIN_TOKEN"},
		Logging:   Logging{Level: "info", Format: "json", AccessLog: true, FlushInterval: units.Duration(100 * time.Millisecond)},
		Redis:     redisconn.DefaultConfig(),
		Cache:     cache.DefaultConfig(),
		Admission: Admission{Backend: "local", DefaultMaxTokens: 1024, Replicas: 1},
		Balancer:  balancer.DefaultConfig(),
		Spillover: Spillover{Kind: "dashscope", BaseURL: "https://dashscope.aliyuncs.com/compatible-mode/v1", APIKeyEnv: "DASHSCOPE_API_KEY", On: []string{"saturated", "failed"}, Price: SpillPrice{Currency: "USD"}, Responses: true},
		Warm:      Warm{Concurrency: 5, HotEntries: 10000},
		Responses: ResponsesConfig{RememberIDs: 100000, RememberFor: units.Duration(24 * time.Hour)},
		Tracing:   Tracing{SampleRatio: 1, ServiceName: "frontdoor"},
		Shutdown:  Shutdown{Grace: units.Duration(30e9)},
	}
}

func defaultLimits() Limits {
	return Limits{MaxBodyBytes: 8 << 20, MaxUpstreamBodyBytes: adapters.DefaultMaxBody,
		MaxMessages: adapters.DefaultMaxMessages, MaxContentParts: adapters.DefaultMaxContentParts, MaxTokenIDs: adapters.DefaultMaxTokenIDs,
		ParseBudgetBytes: 48 << 20, ParseWait: units.Duration(time.Second)}
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
	// The default admin.token_env unset means no admin token, so no admin
	// surface on the main listener: a choice, not a missing key. A config
	// that names another variable asks for one.
	if c.Admin.TokenEnv != DefaultConfig().Admin.TokenEnv {
		add("admin.token_env", c.Admin.TokenEnv)
	}
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
