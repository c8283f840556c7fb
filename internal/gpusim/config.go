package gpusim

import (
	"errors"
	"fmt"
	"frontdoor/embed"
	"net"
	"strings"
	"time"
)

// Kind selects which inference server gpusim imitates: error bodies, metric
// names and a few protocol quirks follow it.
type Kind string

// The simulated server kinds.
const (
	KindVLLM      Kind = "vllm"
	KindTGI       Kind = "tgi"
	KindSGLang    Kind = "sglang"
	KindDashScope Kind = "dashscope"
)

// Valid reports whether k is one of the known kinds.
func (k Kind) Valid() bool {
	switch k {
	case KindVLLM, KindTGI, KindSGLang, KindDashScope:
		return true
	}
	return false
}

// Config describes one simulated node. Fields whose zero value makes no
// sense (Listen, Models, Kind, MaxNumSeqs, OutputTokens, KVCapacityTokens)
// take their default when zero; TTFT and ITL of zero mean no delay at all.
type Config struct {
	Listen           string        // default "127.0.0.1:9001"
	Models           []string      // default ["qwen3-8b"]; metrics are labelled with the first
	Kind             Kind          // default "vllm"
	MaxNumSeqs       int           // default 10: at most this many generate at once; the rest wait (FIFO)
	MaxWaiting       int           // 0 = unlimited; if waiting would exceed it -> 429
	TTFT             time.Duration // delay after a request gets a slot before the first token (prefill); DefaultConfig: 200ms
	ITL              time.Duration // delay between tokens; DefaultConfig: 20ms
	OutputTokens     int           // default 64: tokens generated, capped by max_tokens / max_completion_tokens
	Jitter           float64       // ± fraction applied to TTFT and ITL (0.1 = ±10%)
	FailRate         float64       // 0..1: fraction answered with HTTP 500 before any token
	HangRate         float64       // 0..1: fraction that take a slot and never answer until the client goes away or shutdown
	APIKey           string        // if set: require "Authorization: Bearer <key>" on /v1/*, else 401
	RPM              int           // 0 = unlimited; requests per minute (token bucket, burst RPM); above -> 429
	KVCapacityTokens int           // default 65536: KV usage = tokens in flight / this; KVBlocks×BlockSize when KVBlocks is set
	PrefixCache      bool          // cache prompt KV blocks (see prefixCache) and skip their prefill
	BlockSize        int           // default 16: tokens per KV block
	KVBlocks         int           // prefix-cache capacity in blocks (LRU); 0 = KVCapacityTokens ÷ BlockSize
	PrefillPerToken  time.Duration // prefill time per prompt token not found in the prefix cache, added to TTFT; 0 = none
	Seed             int64         // RNG seed for jitter/fail/hang draws (0 = time-based)
	EmbeddingDims    int           // default 1024: vector length of /v1/embeddings unless the request asks for "dimensions"
	JudgeLabels      *JudgeLabels  // nil = off; else judge requests are answered yes, no or unsure from it (see judgeRequest)
}

// Defaults.
const (
	DefaultListen           = "127.0.0.1:9001"
	DefaultModel            = "qwen3-8b"
	DefaultMaxNumSeqs       = 10
	DefaultTTFT             = 200 * time.Millisecond
	DefaultITL              = 20 * time.Millisecond
	DefaultOutputTokens     = 64
	DefaultKVCapacityTokens = 65536
	DefaultBlockSize        = 16
	DefaultEmbeddingDims    = 1024
)

// DefaultConfig returns the documented defaults.
func DefaultConfig() Config {
	return Config{
		Listen:           DefaultListen,
		Models:           []string{DefaultModel},
		Kind:             KindVLLM,
		MaxNumSeqs:       DefaultMaxNumSeqs,
		TTFT:             DefaultTTFT,
		ITL:              DefaultITL,
		OutputTokens:     DefaultOutputTokens,
		KVCapacityTokens: DefaultKVCapacityTokens,
		BlockSize:        DefaultBlockSize,
		EmbeddingDims:    DefaultEmbeddingDims,
	}
}

// withDefaults fills the fields whose zero value means "default".
func (c Config) withDefaults() Config {
	if c.Listen == "" {
		c.Listen = DefaultListen
	}
	if len(c.Models) == 0 {
		c.Models = []string{DefaultModel}
	} else {
		c.Models = append([]string(nil), c.Models...)
	}
	if c.Kind == "" {
		c.Kind = KindVLLM
	}
	if c.MaxNumSeqs == 0 {
		c.MaxNumSeqs = DefaultMaxNumSeqs
	}
	if c.OutputTokens == 0 {
		c.OutputTokens = DefaultOutputTokens
	}
	if c.KVCapacityTokens == 0 {
		c.KVCapacityTokens = DefaultKVCapacityTokens
	}
	if c.BlockSize == 0 {
		c.BlockSize = DefaultBlockSize
	}
	if c.KVBlocks > 0 {
		c.KVCapacityTokens = c.KVBlocks * c.BlockSize
	} else if c.KVBlocks == 0 && c.BlockSize > 0 {
		c.KVBlocks = max(1, c.KVCapacityTokens/c.BlockSize)
	}
	if c.EmbeddingDims == 0 {
		c.EmbeddingDims = DefaultEmbeddingDims
	}
	return c
}

// Validate checks the config (after defaults are applied to zero fields) and
// returns every problem found, each naming its field.
func (c Config) Validate() error {
	c = c.withDefaults()
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: %s", field, fmt.Sprintf(format, args...)))
	}
	if _, _, err := net.SplitHostPort(c.Listen); err != nil {
		bad("listen", "must be host:port (%v)", err)
	}
	seen := make(map[string]bool, len(c.Models))
	for _, m := range c.Models {
		switch {
		case strings.TrimSpace(m) == "":
			bad("models", "empty model name")
		case seen[m]:
			bad("models", "duplicate model %q", m)
		}
		seen[m] = true
	}
	if !c.Kind.Valid() {
		bad("kind", "must be one of vllm, tgi, sglang, dashscope (got %q)", c.Kind)
	}
	if c.MaxNumSeqs < 1 {
		bad("max_num_seqs", "must be >= 1")
	}
	if c.MaxWaiting < 0 {
		bad("max_waiting", "must be >= 0 (0 = unlimited)")
	}
	if c.TTFT < 0 {
		bad("ttft", "must be >= 0")
	}
	if c.ITL < 0 {
		bad("itl", "must be >= 0")
	}
	if c.OutputTokens < 1 {
		bad("output_tokens", "must be >= 1")
	}
	if c.Jitter < 0 || c.Jitter >= 1 || c.Jitter != c.Jitter {
		bad("jitter", "must be in [0, 1)")
	}
	if !isRate(c.FailRate) {
		bad("fail_rate", "must be in [0, 1]")
	}
	if !isRate(c.HangRate) {
		bad("hang_rate", "must be in [0, 1]")
	}
	if c.RPM < 0 {
		bad("rpm", "must be >= 0 (0 = unlimited)")
	}
	if c.KVCapacityTokens < 1 {
		bad("kv_capacity_tokens", "must be >= 1")
	}
	if c.BlockSize < 1 {
		bad("block_size", "must be >= 1")
	}
	if c.KVBlocks < 0 {
		bad("kv_blocks", "must be >= 0 (0 = kv_capacity_tokens / block_size)")
	}
	if c.PrefillPerToken < 0 {
		bad("prefill_per_token", "must be >= 0")
	}
	if c.EmbeddingDims < embed.MinDims || c.EmbeddingDims > embed.MaxDims {
		bad("embedding_dims", "must be between %d and %d", embed.MinDims, embed.MaxDims)
	}
	return errors.Join(errs...)
}

func isRate(f float64) bool { return f >= 0 && f <= 1 }
