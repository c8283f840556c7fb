package router

import (
	"testing"

	"github.com/valyala/fasthttp"
)

// BenchmarkPassThrough measures a non-streaming request through the gateway
// to an in-process gpusim with zero TTFT and ITL (client, gateway and node
// in one process: compare with BenchmarkDirect).
func BenchmarkPassThrough(b *testing.B) {
	benchTarget(b, true)
}

// BenchmarkDirect is the same request sent straight to gpusim.
func BenchmarkDirect(b *testing.B) {
	benchTarget(b, false)
}

func benchTarget(b *testing.B, viaGateway bool) {
	gw, sims := simAndGateway(b, 1, nil)
	url := sims[0].URL() + "/v1/chat/completions"
	if viaGateway {
		url = gw.URL + "/v1/chat/completions"
	}
	body := []byte(chatBody("What is the capital of France? Answer in one word.", `"temperature":0.7,"max_tokens":16`))
	client := &fasthttp.Client{MaxConnsPerHost: 256}
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
		for pb.Next() {
			req.SetRequestURI(url)
			req.Header.SetMethod("POST")
			req.Header.SetContentType("application/json")
			req.SetBodyRaw(body)
			if err := client.Do(req, resp); err != nil || resp.StatusCode() != 200 {
				b.Fatalf("%v %d", err, resp.StatusCode())
			}
		}
	})
}
