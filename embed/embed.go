package embed

import (
	"context"
	"fmt"
	"math"
	"net/url"
	"time"

	"github.com/viterin/vek/vek32"

	"frontdoor/internal/redact"
	"frontdoor/internal/units"
)

// Embedder turns text into a vector. Implementations are safe for concurrent use.
type Embedder interface {
	// Embed returns an L2-normalised vector of length Dims(). The caller owns
	// the returned slice.
	Embed(ctx context.Context, text string) ([]float32, error)
	// Dims is the length of every vector Embed returns.
	Dims() int
	// Name identifies the embedder and its vector space, e.g. "local-512" or
	// "openai:text-embedding-v4". Vectors from embedders with different
	// names must not be compared.
	Name() string
}

// Kinds of embedder a Config can ask for.
const (
	KindLocal  = "local"
	KindOpenAI = "openai"
)

// Limits checked by Validate.
const (
	MinDims         = 8
	MaxDims         = 8192
	MaxBatchSize    = 2048
	MaxBatchWait    = time.Second
	MaxMemoEntries  = 1 << 22
	MinInputBytes   = 1 << 10
	MaxInputBytes   = 1 << 20
	defaultDims     = 512
	defaultTimeout  = 2 * time.Second
	defaultBatch    = 32
	defaultWait     = 2 * time.Millisecond
	defaultMemoSize = 4096
)

// Config selects and tunes an embedder. Zero numeric fields take their defaults.
type Config struct {
	Kind        string         `yaml:"kind"`         // "local" (default) | "openai"
	URL         string         `yaml:"url"`          // openai: base URL, e.g. http://127.0.0.1:8000/v1 (POST {url}/embeddings)
	Model       string         `yaml:"model"`        // openai: model name sent in the request
	APIKeyEnv   string         `yaml:"api_key_env"`  // openai: env var holding the bearer key; the key is never logged or put in errors
	Dims        int            `yaml:"dims"`         // vector length; openai: must equal what the server returns
	Timeout     units.Duration `yaml:"timeout"`      // openai: per HTTP call
	BatchSize   int            `yaml:"batch_size"`   // openai: most texts in one call
	BatchWait   units.Duration `yaml:"batch_wait"`   // openai: how long to gather concurrent texts into one call
	MemoEntries int            `yaml:"memo_entries"` // openai: LRU of recent text -> vector
	// MaxInputBytes bounds the text the local embedder reads: a longer
	// one embeds its first and last halves of it (see Local).
	MaxInputBytes int `yaml:"max_input_bytes"`
}

// DefaultConfig returns the local embedder with every default filled in.
func DefaultConfig() Config {
	return Config{
		Kind:        KindLocal,
		Dims:        defaultDims,
		Timeout:     units.Duration(defaultTimeout),
		BatchSize:   defaultBatch,
		BatchWait:   units.Duration(defaultWait),
		MemoEntries: defaultMemoSize,

		MaxInputBytes: DefaultMaxInputBytes,
	}
}

// Validate fills zero fields with their defaults and reports the first invalid
// field. Error messages start with the field's yaml key.
func (c *Config) Validate() error {
	def := DefaultConfig()
	if c.Kind == "" {
		c.Kind = def.Kind
	}
	if c.Dims == 0 {
		c.Dims = def.Dims
	}
	if c.Timeout == 0 {
		c.Timeout = def.Timeout
	}
	if c.BatchSize == 0 {
		c.BatchSize = def.BatchSize
	}
	if c.BatchWait == 0 {
		c.BatchWait = def.BatchWait
	}
	if c.MemoEntries == 0 {
		c.MemoEntries = def.MemoEntries
	}
	if c.MaxInputBytes == 0 {
		c.MaxInputBytes = def.MaxInputBytes
	}

	switch c.Kind {
	case KindLocal, KindOpenAI:
	default:
		return fmt.Errorf("kind: must be %q or %q, got %q", KindLocal, KindOpenAI, c.Kind)
	}
	if c.Dims < MinDims || c.Dims > MaxDims {
		return fmt.Errorf("dims: must be between %d and %d, got %d", MinDims, MaxDims, c.Dims)
	}
	if c.Timeout < 0 {
		return fmt.Errorf("timeout: must be positive, got %s", c.Timeout)
	}
	if c.BatchSize < 1 || c.BatchSize > MaxBatchSize {
		return fmt.Errorf("batch_size: must be between 1 and %d, got %d", MaxBatchSize, c.BatchSize)
	}
	if c.BatchWait < 0 || c.BatchWait.D() > MaxBatchWait {
		return fmt.Errorf("batch_wait: must be between 0 and %s, got %s", MaxBatchWait, c.BatchWait)
	}
	if c.MemoEntries < 0 || c.MemoEntries > MaxMemoEntries {
		return fmt.Errorf("memo_entries: must be between 0 and %d, got %d", MaxMemoEntries, c.MemoEntries)
	}
	if c.MaxInputBytes < MinInputBytes || c.MaxInputBytes > MaxInputBytes {
		return fmt.Errorf("max_input_bytes: must be between %d and %d, got %d", MinInputBytes, MaxInputBytes, c.MaxInputBytes)
	}
	if c.Kind != KindOpenAI {
		return nil
	}
	if c.URL == "" {
		return fmt.Errorf("url: required when kind is %q", KindOpenAI)
	}
	u, err := url.Parse(c.URL)
	if err != nil {
		return fmt.Errorf("url: %w", redact.ParseError(err))
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return fmt.Errorf("url: must start with http:// or https://, got %q", redact.URL(c.URL))
	}
	if u.Host == "" {
		return fmt.Errorf("url: has no host: %q", redact.URL(c.URL))
	}
	if c.Model == "" {
		return fmt.Errorf("model: required when kind is %q", KindOpenAI)
	}
	return nil
}

// New validates cfg and builds the embedder it asks for.
func New(cfg Config) (Embedder, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("embed: %w", err)
	}
	if cfg.Kind == KindOpenAI {
		return NewOpenAI(cfg)
	}
	return NewLocalBounded(cfg.Dims, cfg.MaxInputBytes), nil
}

// Cosine returns the cosine similarity of two L2-normalised vectors, i.e. their
// dot product. It returns 0 when the lengths differ or a vector is empty.
func Cosine(a, b []float32) float32 {
	if len(a) == 0 || len(a) != len(b) {
		return 0
	}
	return vek32.Dot(a, b)
}

// normalize scales v to unit length in place and reports false when v is all
// zeros (or not finite) and so cannot be normalised.
func normalize(v []float32) bool {
	if len(v) == 0 {
		return false
	}
	n := vek32.Norm(v)
	if n == 0 || math.IsNaN(float64(n)) || math.IsInf(float64(n), 0) {
		return false
	}
	vek32.MulNumber_Inplace(v, 1/n)
	return true
}
