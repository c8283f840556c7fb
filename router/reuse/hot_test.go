package reuse

import (
	"strings"
	"testing"
)

func TestHotTrackerStaysBounded(t *testing.T) {
	h := newHotTracker(64) // 4 per shard
	for i := range 10000 {
		h.hit(string(rune('a'+i%7))+strings.Repeat("x", i%50), "t", []byte(`{}`))
	}
	n := 0
	for i := range h.shards {
		n += len(h.shards[i].m)
	}
	if n > 64 {
		t.Fatalf("%d entries tracked, cap 64", n)
	}
	// A steady favourite survives the churn at the top.
	h = newHotTracker(64)
	for i := range 20000 {
		h.hit("fav", "t", []byte(`{}`))
		h.hit(strings.Repeat("y", 1+i%3000), "t", []byte(`{}`))
	}
	if top := h.top(1, ""); len(top) != 1 || top[0].Entry != "fav" {
		t.Fatalf("top = %+v", top)
	}
}

// BenchmarkHotHit is what the hit counter adds to a cache hit.
func BenchmarkHotHit(b *testing.B) {
	h := newHotTracker(10000)
	ids := make([]string, 1000)
	for i := range ids {
		ids[i] = strings.Repeat("0", 8) + string(rune('a'+i%26)) + strings.Repeat("1", i%7) + string(rune('A'+i/26%26))
	}
	body := []byte(`{"model":"qwen3-8b","messages":[{"role":"user","content":"What is the capital of France?"}]}`)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			h.hit(ids[i%len(ids)], "default", body)
			i++
		}
	})
}
