package cache

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"frontdoor/embed"
	"frontdoor/internal/units"
)

// ExactConfig is cache.exact.
type ExactConfig struct {
	Enabled bool `yaml:"enabled"`
}

// SemanticConfig is cache.semantic.
type SemanticConfig struct {
	Enabled   bool    `yaml:"enabled"`
	Threshold float64 `yaml:"threshold"`
	// ModelThresholds overrides Threshold per model.
	ModelThresholds map[string]float64 `yaml:"model_thresholds"`
	Guards          Guards             `yaml:"guards"`
	// Verify re-checks semantic hits with a judge model.
	Verify VerifyConfig `yaml:"verify"`
}

// Eligibility is cache.eligibility.
type Eligibility struct {
	MaxTemperature  float64 `yaml:"max_temperature"`
	CacheMultimodal bool    `yaml:"cache_multimodal"`
	CacheToolCalls  bool    `yaml:"cache_tool_calls"`
}

// StreamReplay is cache.stream_replay.
type StreamReplay struct {
	ChunkTokens int            `yaml:"chunk_tokens"`
	Pace        units.Duration `yaml:"pace"`
}

// ReadsConfig is cache.reads: the lookups on the request path.
type ReadsConfig struct {
	Timeout units.Duration `yaml:"timeout"` // per lookup; a slower store is a miss
	Breaker BreakerConfig  `yaml:"breaker"`
}

// WritesConfig is cache.writes: the write-back, off the request path.
type WritesConfig struct {
	Timeout units.Duration `yaml:"timeout"` // per batch
	Queue   int            `yaml:"queue"`   // entries waiting; a full queue drops the write
	Workers int            `yaml:"workers"`
	Batch   int            `yaml:"batch"` // most entries in one pipeline
	Breaker BreakerConfig  `yaml:"breaker"`
}

// RedisIndexConfig is cache.redis_index: the RediSearch vector index.
type RedisIndexConfig struct {
	Type           string `yaml:"type"`            // hnsw | flat
	M              int    `yaml:"m"`               // hnsw: edges per node
	EFConstruction int    `yaml:"ef_construction"` // hnsw: candidates kept while inserting
	EFRuntime      int    `yaml:"ef_runtime"`      // hnsw: candidates kept while searching
	// BatchSize is how many nearest vectors RediSearch fetches at a time
	// when it filters them by scope afterwards (its BATCHES policy).
	BatchSize int `yaml:"batch_size"`
	// InitialCap is the index's initial capacity in vectors (0: RediSearch's
	// default). RediSearch 2.6 resizes an HNSW index by 1024 vectors and
	// copies all of its capacity each time, inside Redis's one thread: when
	// it grows past its capacity, and when a deletion or expiry leaves a
	// multiple of 1024 vectors with a block to spare. A large capacity spares
	// the growths but makes each of those shrinks copy all of it. The room
	// counts in Redis's used_memory from the first insert on.
	InitialCap int `yaml:"initial_cap"`
}

// Validate checks the section.
func (c RedisIndexConfig) Validate() error {
	var errs []error
	switch c.Type {
	case "hnsw", "flat":
	default:
		errs = append(errs, fmt.Errorf("type: %q is not one of hnsw, flat", c.Type))
	}
	if c.M < 2 || c.M > 512 {
		errs = append(errs, errors.New("m: must be between 2 and 512"))
	}
	if c.EFConstruction < 1 || c.EFConstruction > 4096 {
		errs = append(errs, errors.New("ef_construction: must be between 1 and 4096"))
	}
	if c.EFRuntime < 1 || c.EFRuntime > 4096 {
		errs = append(errs, errors.New("ef_runtime: must be between 1 and 4096"))
	}
	if c.BatchSize < 1 || c.BatchSize > 4096 {
		errs = append(errs, errors.New("batch_size: must be between 1 and 4096"))
	}
	if c.InitialCap < 0 || c.InitialCap > 1<<30 {
		errs = append(errs, errors.New("initial_cap: must be between 0 and 2^30"))
	}
	return errors.Join(errs...)
}

// Config is the cache: section.
type Config struct {
	Backend      string           `yaml:"backend"` // memory | redis | off
	TTL          units.Duration   `yaml:"ttl"`
	MaxTTL       units.Duration   `yaml:"max_ttl"` // cap for X-Cache-TTL; default: ttl
	MaxBytes     units.Bytes      `yaml:"max_bytes"`
	VectorSearch string           `yaml:"vector_search"` // auto | redisearch | local
	RedisIndex   RedisIndexConfig `yaml:"redis_index"`
	LocalIndex   IndexConfig      `yaml:"local_index"` // the in-process index: memory, and plain Redis
	Reads        ReadsConfig      `yaml:"reads"`
	Writes       WritesConfig     `yaml:"writes"`
	Exact        ExactConfig      `yaml:"exact"`
	Semantic     SemanticConfig   `yaml:"semantic"`
	Embedder     embed.Config     `yaml:"embedder"`
	Eligibility  Eligibility      `yaml:"eligibility"`
	Coalesce     bool             `yaml:"coalesce"`
	StreamReplay StreamReplay     `yaml:"stream_replay"`
	// KeyByUser keys entries by the request's user field as well (see
	// KeyOptions): off, the tenant's namespace is the only boundary.
	KeyByUser bool `yaml:"key_by_user"`
}

// prefixLines puts prefix before each line of err (a joined error).
func prefixLines(prefix string, err error) error {
	lines := strings.Split(err.Error(), "\n")
	for i, l := range lines {
		lines[i] = prefix + l
	}
	return errors.New(strings.Join(lines, "\n"))
}

// DefaultConfig returns the embedded defaults: a memory cache with the local
// embedder.
func DefaultConfig() Config {
	return Config{
		Backend:      "memory",
		TTL:          units.Duration(24 * 3600e9),
		MaxBytes:     512 << 20,
		VectorSearch: "auto",
		RedisIndex:   RedisIndexConfig{Type: "hnsw", M: 16, EFConstruction: 200, EFRuntime: 10, BatchSize: 64},
		LocalIndex:   DefaultIndexConfig(),
		Reads: ReadsConfig{Timeout: units.Duration(100 * time.Millisecond),
			Breaker: BreakerConfig{FailureRatio: 0.5, MinCalls: 20, Window: units.Duration(10 * time.Second), OpenFor: units.Duration(time.Second)}},
		Writes: WritesConfig{Timeout: units.Duration(2 * time.Second), Queue: 10000, Workers: 2, Batch: 64,
			Breaker: BreakerConfig{FailureRatio: 0.5, MinCalls: 10, Window: units.Duration(30 * time.Second), OpenFor: units.Duration(2 * time.Second)}},
		Exact:        ExactConfig{Enabled: true},
		Semantic:     SemanticConfig{Enabled: true, Threshold: 0.92, Guards: DefaultGuards(), Verify: DefaultVerifyConfig()},
		Embedder:     embed.DefaultConfig(),
		Eligibility:  Eligibility{MaxTemperature: 2.0, CacheToolCalls: true},
		Coalesce:     true,
		StreamReplay: StreamReplay{ChunkTokens: 4},
		KeyByUser:    false, // the tenant is the boundary; user is an end-user id for abuse monitoring
	}
}

// Validate checks the section. Errors are prefixed with their YAML key.
func (c *Config) Validate() error {
	var errs []error
	add := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	switch c.Backend {
	case "memory", "redis", "off":
	default:
		add("backend: %q is not one of memory, redis, off", c.Backend)
	}
	if c.TTL <= 0 {
		add("ttl: must be > 0")
	}
	if c.MaxTTL < 0 {
		add("max_ttl: must be >= 0")
	}
	if c.Backend == "memory" && c.MaxBytes < 1<<20 {
		add("max_bytes: must be at least 1MiB")
	}
	switch c.VectorSearch {
	case "auto", "redisearch", "local":
	default:
		add("vector_search: %q is not one of auto, redisearch, local", c.VectorSearch)
	}
	if err := c.LocalIndex.Validate(); err != nil {
		errs = append(errs, prefixLines("local_index.", err))
	}
	if err := c.RedisIndex.Validate(); err != nil {
		errs = append(errs, prefixLines("redis_index.", err))
	}
	if c.Reads.Timeout <= 0 {
		add("reads.timeout: must be > 0")
	}
	if err := c.Reads.Breaker.Validate(); err != nil {
		errs = append(errs, prefixLines("reads.breaker.", err))
	}
	if c.Writes.Timeout <= 0 {
		add("writes.timeout: must be > 0")
	}
	if c.Writes.Queue < 1 {
		add("writes.queue: must be >= 1")
	}
	if c.Writes.Workers < 1 || c.Writes.Workers > 64 {
		add("writes.workers: must be between 1 and 64")
	}
	if c.Writes.Batch < 1 || c.Writes.Batch > 1024 {
		add("writes.batch: must be between 1 and 1024")
	}
	if err := c.Writes.Breaker.Validate(); err != nil {
		errs = append(errs, prefixLines("writes.breaker.", err))
	}
	if t := c.Semantic.Threshold; t <= 0 || t > 1 {
		add("semantic.threshold: must be in (0, 1]")
	}
	for m, t := range c.Semantic.ModelThresholds {
		if t <= 0 || t > 1 {
			add("semantic.model_thresholds.%s: must be in (0, 1]", m)
		}
	}
	if r := c.Semantic.Guards.MaxLengthRatio; r != 0 && r < 1 {
		add("semantic.guards.max_length_ratio: must be >= 1, or 0 for no length guard")
	}
	if err := c.Semantic.Verify.Validate(); err != nil {
		errs = append(errs, prefixLines("semantic.verify.", err))
	}
	if c.Semantic.Enabled {
		if err := c.Embedder.Validate(); err != nil {
			add("embedder.%w", err)
		}
	}
	if c.Eligibility.MaxTemperature < 0 || c.Eligibility.MaxTemperature > 2 {
		add("eligibility.max_temperature: must be between 0 and 2")
	}
	if c.StreamReplay.ChunkTokens < 1 {
		add("stream_replay.chunk_tokens: must be >= 1")
	}
	if c.StreamReplay.Pace < 0 {
		add("stream_replay.pace: must be >= 0")
	}
	return errors.Join(errs...)
}
