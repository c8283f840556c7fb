package cache

import (
	"errors"
	"fmt"

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

// Config is the cache: section.
type Config struct {
	Backend      string         `yaml:"backend"` // memory | redis | off
	TTL          units.Duration `yaml:"ttl"`
	MaxTTL       units.Duration `yaml:"max_ttl"` // cap for X-Cache-TTL; default: ttl
	MaxBytes     units.Bytes    `yaml:"max_bytes"`
	VectorSearch string         `yaml:"vector_search"` // auto | redisearch | local
	Exact        ExactConfig    `yaml:"exact"`
	Semantic     SemanticConfig `yaml:"semantic"`
	Embedder     embed.Config   `yaml:"embedder"`
	Eligibility  Eligibility    `yaml:"eligibility"`
	Coalesce     bool           `yaml:"coalesce"`
	StreamReplay StreamReplay   `yaml:"stream_replay"`
}

// DefaultConfig returns the embedded defaults: a memory cache with the local
// embedder.
func DefaultConfig() Config {
	return Config{
		Backend:      "memory",
		TTL:          units.Duration(24 * 3600e9),
		MaxBytes:     512 << 20,
		VectorSearch: "auto",
		Exact:        ExactConfig{Enabled: true},
		Semantic:     SemanticConfig{Enabled: true, Threshold: 0.91, Guards: Guards{Numbers: true, Negation: true}},
		Embedder:     embed.DefaultConfig(),
		Eligibility:  Eligibility{MaxTemperature: 2.0, CacheToolCalls: true},
		Coalesce:     true,
		StreamReplay: StreamReplay{ChunkTokens: 4},
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
	if t := c.Semantic.Threshold; t <= 0 || t > 1 {
		add("semantic.threshold: must be in (0, 1]")
	}
	for m, t := range c.Semantic.ModelThresholds {
		if t <= 0 || t > 1 {
			add("semantic.model_thresholds.%s: must be in (0, 1]", m)
		}
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
