package gpusim

import (
	"testing"

	"github.com/valyala/fasthttp"
)

// BenchmarkUnaryZeroDelay measures the handler's own cost for a
// non-streaming chat request with TTFT = ITL = 0 (the overhead benchmark's
// baseline).
func BenchmarkUnaryZeroDelay(b *testing.B) {
	cfg := DefaultConfig()
	cfg.TTFT, cfg.ITL = 0, 0
	s, err := New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	var req fasthttp.Request
	req.Header.SetMethod("POST")
	req.SetRequestURI("/v1/chat/completions")
	req.Header.SetContentType("application/json")
	req.SetBodyString(`{"model":"qwen3-8b","max_tokens":64,"messages":[{"role":"system","content":"You are helpful."},{"role":"user","content":"Write a haiku about GPUs."}]}`)
	var ctx fasthttp.RequestCtx
	b.ReportAllocs()
	for b.Loop() {
		ctx.Init(&req, nil, nil)
		s.handle(&ctx)
		if ctx.Response.StatusCode() != 200 {
			b.Fatalf("status %d", ctx.Response.StatusCode())
		}
	}
}
