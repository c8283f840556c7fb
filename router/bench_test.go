package router

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"frontdoor/adapters"
	"frontdoor/balancer"
	"frontdoor/internal/testenv"
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
	benchPost(b, url, chatBody("What is the capital of France? Answer in one word.", `"temperature":0.7,"max_tokens":16`), nil)
}

// benchPost posts body to url in parallel b.N times; each answer must be
// a 200 that check (when set) accepts.
func benchPost(b *testing.B, url, body string, check func(resp *fasthttp.Response) error) {
	client := &fasthttp.Client{MaxConnsPerHost: 256}
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
		for pb.Next() {
			req.SetRequestURI(url)
			req.Header.SetMethod("POST")
			req.Header.SetContentType("application/json")
			req.SetBodyString(body)
			if err := client.Do(req, resp); err != nil || resp.StatusCode() != 200 {
				b.Fatalf("%v %d", err, resp.StatusCode())
			}
			if check != nil {
				if err := check(resp); err != nil {
					b.Fatal(err)
				}
			}
		}
	})
}

// cannedBackend answers every request with the same bytes, without I/O.
type cannedBackend struct{ name string }

var cannedAnswer = []byte(`{"id":"chatcmpl-1","object":"chat.completion","created":1796038047,"model":"qwen3-8b","choices":[{"index":0,"message":{"role":"assistant","content":"large little own days its other came as saw her days how mother me end others"},"logprobs":null,"finish_reason":"stop","stop_reason":null}],"usage":{"prompt_tokens":20,"total_tokens":36,"completion_tokens":16}}`)

func (c *cannedBackend) Send(context.Context, *adapters.UpstreamRequest) (*adapters.UpstreamResponse, error) {
	return &adapters.UpstreamResponse{Status: 200, ContentType: []byte("application/json"), Body: cannedAnswer}, nil
}
func (c *cannedBackend) MapError(status int, body []byte) *adapters.APIError {
	return adapters.UpstreamError("canned")
}
func (c *cannedBackend) Name() string { return c.name }

// BenchmarkHandlerPassThrough is the gateway's own work for one
// non-streaming miss (cache off): the handler is called directly and the
// node answers from memory, so no socket or upstream client is measured.
func BenchmarkHandlerPassThrough(b *testing.B) {
	for _, accessLog := range []bool{false, true} {
		b.Run(fmt.Sprintf("access_log=%v", accessLog), func(b *testing.B) { benchHandlerPassThrough(b, accessLog) })
	}
}

func benchHandlerPassThrough(b *testing.B, accessLog bool) {
	cfg := DefaultConfig()
	cfg.Cache.Backend = "off"
	cfg.Logging.AccessLog = accessLog
	cfg.Balancer.HealthInterval = 3600e9
	cfg.Nodes = []balancer.NodeConfig{{Name: "gpu-a", URL: "http://127.0.0.1:1", Kind: "vllm", Models: []string{"qwen3-8b"}, MaxConcurrency: 10, Weight: 1}}
	gw, err := New(cfg, Deps{Logger: NewLogger(cfg.Logging, io.Discard), Backends: map[string]adapters.Backend{"gpu-a": &cannedBackend{name: "gpu-a"}}})
	if err != nil {
		b.Fatal(err)
	}
	body := []byte(`{"model":"qwen3-8b","messages":[{"role":"system","content":"You are a helpful assistant."},{"role":"user","content":"What is the capital of France? Answer in one word."}],"temperature":0.7,"max_tokens":16}`)
	var ctx fasthttp.RequestCtx
	ctx.Init(&fasthttp.Request{}, &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 5555}, nil)
	b.ReportAllocs()
	for b.Loop() {
		ctx.Request.Reset()
		ctx.Response.Reset()
		ctx.Request.SetRequestURI("/v1/chat/completions")
		ctx.Request.Header.SetMethod("POST")
		ctx.Request.Header.SetContentType("application/json")
		ctx.Request.SetBodyRaw(body)
		gw.handle(&ctx)
		if ctx.Response.StatusCode() != 200 {
			b.Fatalf("status %d: %s", ctx.Response.StatusCode(), ctx.Response.Body())
		}
	}
}

// BenchmarkStreamPassThrough is a streamed request (16 tokens) through the
// gateway to an in-process gpusim with zero TTFT and ITL, read to [DONE].
func BenchmarkStreamPassThrough(b *testing.B) {
	gw, _ := simAndGateway(b, 1, nil)
	url := gw.URL + "/v1/chat/completions"
	body := chatBody("What is the capital of France? Answer in one word.", `"stream":true,"temperature":0.7,"max_tokens":16`)
	benchPost(b, url, body, func(resp *fasthttp.Response) error {
		if !bytes.HasSuffix(resp.Body(), []byte("data: [DONE]\n\n")) {
			return fmt.Errorf("stream not whole: %q", resp.Body())
		}
		return nil
	})
}

// BenchmarkHandlerMiss is the gateway's own work for one cache miss, the
// handler called directly and the node answered from memory: every prompt
// is new (bench/misspath's shape, differing in one number), so each
// request looks up, goes "upstream" and writes back. scope is the number
// of entries stored in the prompts' scope before the timer starts.
// cpu-µs/op is the process's CPU time, write-back workers included.
func BenchmarkHandlerMiss(b *testing.B) {
	for _, c := range []struct {
		name  string
		cache string // off, exact or default
		scope int
	}{{"off", "off", 0}, {"exact", "exact", 0}, {"default/scope=2k", "default", 2000}, {"default/scope=100k", "default", 100_000}} {
		b.Run(c.name, func(b *testing.B) { benchHandlerMiss(b, c.cache, c.scope) })
	}
}

func benchHandlerMiss(b *testing.B, mode string, scope int) {
	cfg := DefaultConfig()
	switch mode {
	case "off":
		cfg.Cache.Backend = "off"
	case "exact":
		cfg.Cache.Semantic.Enabled = false
	}
	cfg.Balancer.HealthInterval = 3600e9
	cfg.Nodes = []balancer.NodeConfig{{Name: "gpu-a", URL: "http://127.0.0.1:1", Kind: "vllm", Models: []string{"qwen3-8b"}, MaxConcurrency: 10, Weight: 1}}
	logs := &syncBuffer{}
	gw, err := New(cfg, Deps{Logger: NewLogger(cfg.Logging, logs), Backends: map[string]adapters.Backend{"gpu-a": &cannedBackend{name: "gpu-a"}}})
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = gw.Shutdown(context.Background()) }()
	var ctx fasthttp.RequestCtx
	ctx.Init(&fasthttp.Request{}, &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 5555}, nil)
	n := 0
	ask := func() {
		n++
		ctx.Request.Reset()
		ctx.Response.Reset()
		ctx.Request.SetRequestURI("/v1/chat/completions")
		ctx.Request.Header.SetMethod("POST")
		ctx.Request.Header.SetContentType("application/json")
		ctx.Request.SetBodyString(`{"model":"qwen3-8b","messages":[{"role":"user","content":"Order ` + strconv.Itoa(n) + `: what is the capital of France? Answer in one word."}],"temperature":0,"max_tokens":16}`)
		gw.handle(&ctx)
		if ctx.Response.StatusCode() != 200 {
			b.Fatalf("status %d: %s", ctx.Response.StatusCode(), ctx.Response.Body())
		}
		if xc := string(ctx.Response.Header.Peek("X-Cache")); mode != "off" && xc != "miss" {
			b.Fatalf("request %d: X-Cache %q, want miss; the gateway logged:\n%s", n, xc, logs.String())
		}
	}
	for range scope {
		ask()
		if n%1000 == 0 { // let the write-back queue keep up
			time.Sleep(20 * time.Millisecond)
		}
	}
	if scope > 0 { // the write-back queue may drop: the scope must be there
		deadline := time.Now().Add(10 * time.Second)
		for {
			st, err := gw.cache.Store().Stats(context.Background())
			if err == nil && st.VectorEntries >= int64(scope) {
				break
			}
			if time.Now().After(deadline) {
				b.Fatalf("the store holds %d vectors, want %d (%v)", st.VectorEntries, scope, err)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	b.ReportAllocs()
	done := testenv.ReportCPU(b)
	for b.Loop() {
		ask()
	}
	done()
}
