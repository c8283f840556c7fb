// Command bareproxy is the reference floor for bench/overhead: the smallest
// fasthttp reverse proxy (server, HostClient, copy the body back) with none
// of frontdoor's work. What frontdoor costs above it is its own; what
// bareproxy costs above a direct call is the price of any proxy process
// built on fasthttp on this machine.
//
//	go run ./bench/bareproxy -listen 127.0.0.1:8090 -upstream 127.0.0.1:9001
package main

import (
	"flag"
	"log"

	"github.com/valyala/fasthttp"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:8090", "address to serve on")
	upstream := flag.String("upstream", "127.0.0.1:9001", "host:port to forward to")
	flag.Parse()
	client := &fasthttp.HostClient{Addr: *upstream, MaxConns: 4096}
	handler := func(ctx *fasthttp.RequestCtx) {
		if string(ctx.Path()) == "/healthz" {
			return
		}
		req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
		defer fasthttp.ReleaseRequest(req)
		defer fasthttp.ReleaseResponse(resp)
		ctx.Request.CopyTo(req)
		req.SetHost(*upstream)
		if err := client.Do(req, resp); err != nil {
			ctx.Error(err.Error(), fasthttp.StatusBadGateway)
			return
		}
		ctx.SetStatusCode(resp.StatusCode())
		ctx.Response.Header.SetContentTypeBytes(resp.Header.ContentType())
		ctx.SetBody(resp.Body())
	}
	log.Fatal(fasthttp.ListenAndServe(*listen, handler))
}
