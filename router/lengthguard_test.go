package router

import (
	"strings"
	"testing"
)

// A prompt of one word said 50,000 times embeds like the same word said
// 10,000 times (similarity 1.0000): the length guard makes it a miss. With
// the guard off the same pair is a semantic hit, so the guard is what
// decides.
func TestSemanticLengthGuardOverHTTP(t *testing.T) {
	short := cbody(strings.Repeat("hello ", 10_000), "")
	long := cbody(strings.Repeat("hello ", 50_000), "")

	// Prompts this long are embedded only under a raised input bound (by
	// default, past 32 KiB a prompt is cached by its exact key only).
	const maxInput = 1 << 20
	off, _ := cacheGateway(t, "memory", func(c *Config) {
		c.Cache.Semantic.Guards.MaxLengthRatio, c.Cache.Embedder.MaxInputBytes = 0, maxInput
	})
	askStored(t, off, short)
	eventuallyHit(t, off, long, "hit-semantic")

	gw, _ := cacheGateway(t, "memory", func(c *Config) { c.Cache.Embedder.MaxInputBytes = maxInput }) // the default guard
	askStored(t, gw, short)
	if xc, resp, b := ask(t, gw, long); xc != "miss" {
		t.Fatalf("50,000 words after 10,000: X-Cache %q (similarity %s), want miss: %.200s", xc, resp.Header.Get("X-Cache-Similarity"), b)
	}
	if n := metricValue(t, getBody(t, gw.URL+"/metrics"), `frontdoor_cache_guard_rejections_total{guard="length"}`); n < 1 {
		t.Fatalf("length rejections counted: %v", n)
	}
	// Within the ratio it still hits: 12,000 words after 10,000.
	eventuallyHit(t, gw, cbody(strings.Repeat("hello ", 12_000), ""), "hit-semantic")
}
