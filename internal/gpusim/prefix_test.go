package gpusim

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"
)

// chatTTFT sends a non-streaming chat (ITL 0, so the answer comes at the
// first token) and returns how long it took.
func chatTTFT(t *testing.T, c *http.Client, s *Server, system, user string) time.Duration {
	t.Helper()
	body := fmt.Sprintf(`{"model":"qwen3-8b","max_tokens":4,"messages":[{"role":"system","content":%q},{"role":"user","content":%q}]}`, system, user)
	start := time.Now()
	r := doReq(t, c, http.MethodPost, s.URL()+"/v1/chat/completions", body, nil)
	if r.status != 200 {
		t.Fatalf("status %d: %s", r.status, r.body)
	}
	return time.Since(start)
}

func longText(seed string, tokens int) string {
	var b strings.Builder
	for i := 0; b.Len() < tokens*4; i++ {
		fmt.Fprintf(&b, "%s %d ", seed, i)
	}
	return b.String()[:tokens*4]
}

// TestPrefixCacheHit: the second identical long prompt skips the prefill
// of its cached blocks, and the hit counter counts them.
func TestPrefixCacheHit(t *testing.T) {
	s := startServer(t, func(c *Config) {
		c.PrefixCache, c.BlockSize, c.KVBlocks = true, 16, 1000
		c.PrefillPerToken = 500 * time.Microsecond
	})
	c := newClient(t)
	system := longText("system", 400) // 400 tokens: 200ms of prefill uncached
	first := chatTTFT(t, c, s, system, "question one")
	m, types := scrape(t, c, s)
	prompt := PromptTokens(system + "\n" + "question one")
	if m["vllm:prefix_cache_queries_total"] != float64(prompt) || m["vllm:prefix_cache_hits_total"] != 0 {
		t.Fatalf("after the first request: queries %v hits %v, want %d and 0", m["vllm:prefix_cache_queries_total"], m["vllm:prefix_cache_hits_total"], prompt)
	}
	if types["vllm:prefix_cache_hits_total"] != "COUNTER" || m["vllm:cache_config_info"] != 1 {
		t.Errorf("types %v, cache_config_info %v", types["vllm:prefix_cache_hits_total"], m["vllm:cache_config_info"])
	}
	second := chatTTFT(t, c, s, system, "question one")
	m, _ = scrape(t, c, s)
	cachedBlocks := len(system+"\n"+"question one") / 64
	if got, want := m["vllm:prefix_cache_hits_total"], float64(cachedBlocks*16); got != want {
		t.Errorf("hits after the repeat = %v, want %v (every full block)", got, want)
	}
	if first < 200*time.Millisecond || second > first/3 {
		t.Errorf("TTFT uncached %v, cached %v: want >= 200ms and under a third of it", first, second)
	}
	// A different question after the same system prompt reuses the
	// system prompt's blocks only.
	third := chatTTFT(t, c, s, system, "another, different question")
	if third > first/3 {
		t.Errorf("TTFT with a shared system prompt %v, want under a third of %v", third, first)
	}
	if got := m["vllm:kv_cache_usage_perc"]; got != 0 {
		t.Errorf("kv usage with nothing running = %v (cached blocks are free, as in vLLM)", got)
	}
}

// TestPrefixCacheEviction: past kv-blocks the least recently used blocks
// go, and a prompt whose leading blocks went pays its full prefill again.
func TestPrefixCacheEviction(t *testing.T) {
	s := startServer(t, func(c *Config) {
		c.PrefixCache, c.BlockSize, c.KVBlocks = true, 16, 20
		c.PrefillPerToken = 500 * time.Microsecond
	})
	c := newClient(t)
	a, b := longText("alpha", 15*16), longText("beta", 15*16) // 15 blocks each
	chatTTFT(t, c, s, a, "q")
	chatTTFT(t, c, s, a, "q")
	m, _ := scrape(t, c, s)
	hitsA := m["vllm:prefix_cache_hits_total"]
	if hitsA < 15*16 {
		t.Fatalf("hits after repeating a = %v, want >= %d", hitsA, 15*16)
	}
	chatTTFT(t, c, s, b, "q") // 15 new blocks: a's oldest 10 are evicted
	if n := s.prefix.len(); n != 20 {
		t.Errorf("cached blocks = %d, want the capacity, 20", n)
	}
	again := chatTTFT(t, c, s, a, "q")
	m, _ = scrape(t, c, s)
	if got := m["vllm:prefix_cache_hits_total"]; got != hitsA {
		t.Errorf("hits after a's leading blocks were evicted = %v, want unchanged %v", got, hitsA)
	}
	if again < 100*time.Millisecond {
		t.Errorf("TTFT after eviction %v, want the full prefill (>= 100ms)", again)
	}
}

// TestPrefillWithoutCache: without --prefix-cache every prompt token pays
// its prefill, and the prefix counters stay 0.
func TestPrefillWithoutCache(t *testing.T) {
	s := startServer(t, func(c *Config) { c.PrefillPerToken = 500 * time.Microsecond })
	c := newClient(t)
	system := longText("system", 200)
	chatTTFT(t, c, s, system, "q")
	if d := chatTTFT(t, c, s, system, "q"); d < 100*time.Millisecond {
		t.Errorf("TTFT of a repeat without a prefix cache %v, want >= 100ms", d)
	}
	m, _ := scrape(t, c, s)
	if m["vllm:prefix_cache_hits_total"] != 0 || m["vllm:prefix_cache_queries_total"] != 0 {
		t.Errorf("prefix counters without a cache: %v %v", m["vllm:prefix_cache_hits_total"], m["vllm:prefix_cache_queries_total"])
	}
}
