// Command bareproxy is the reference floor for the benchmarks: the smallest
// reverse proxy with none of frontdoor's work. What frontdoor costs above
// it is its own; what bareproxy costs above a direct call is the price of
// any proxy process built on the same Go HTTP stack on this machine.
//
// By default it is fasthttp (server, HostClient) and buffers each answer,
// the floor of bench/overhead. -stream relays the answer as it arrives
// (HostClient.StreamResponseBody, the body handed to the server as a
// stream: fasthttp sends each read of the node as one chunk), the floor of
// bench/streams. -nethttp is net/http's httputil.ReverseProxy with
// FlushInterval -1 (flush after every write), for the same comparison on
// Go's standard library.
//
//	go run ./bench/bareproxy -listen 127.0.0.1:8090 -upstream 127.0.0.1:9001 [-stream | -nethttp]
package main

import (
	"flag"
	"log"
	"net/http"
	"net/http/httputil"
	"net/url"

	"github.com/valyala/fasthttp"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:8090", "address to serve on")
	upstream := flag.String("upstream", "127.0.0.1:9001", "host:port to forward to")
	stream := flag.Bool("stream", false, "relay answers as they arrive instead of buffering them")
	nethttp := flag.Bool("nethttp", false, "use net/http's httputil.ReverseProxy (always streams)")
	flag.Parse()
	if *nethttp {
		u := &url.URL{Scheme: "http", Host: *upstream}
		rp := httputil.NewSingleHostReverseProxy(u)
		rp.FlushInterval = -1
		rp.Transport = &http.Transport{MaxIdleConnsPerHost: 4096, DisableCompression: true}
		log.Fatal(http.ListenAndServe(*listen, rp))
	}
	client := &fasthttp.HostClient{Addr: *upstream, MaxConns: 1 << 16, StreamResponseBody: *stream}
	handler := func(ctx *fasthttp.RequestCtx) {
		if string(ctx.Path()) == "/healthz" {
			return
		}
		req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
		ctx.Request.CopyTo(req)
		req.SetHost(*upstream)
		if err := client.Do(req, resp); err != nil {
			fasthttp.ReleaseRequest(req)
			fasthttp.ReleaseResponse(resp)
			ctx.Error(err.Error(), fasthttp.StatusBadGateway)
			return
		}
		ctx.SetStatusCode(resp.StatusCode())
		ctx.Response.Header.SetContentTypeBytes(resp.Header.ContentType())
		if *stream {
			// The server closes the body stream once it is written: that
			// returns the node's connection and the request and response.
			ctx.SetBodyStream(&relay{req: req, resp: resp}, -1)
			return
		}
		ctx.SetBody(resp.Body())
		fasthttp.ReleaseRequest(req)
		fasthttp.ReleaseResponse(resp)
	}
	log.Fatal(fasthttp.ListenAndServe(*listen, handler))
}

// relay is the node's answer body, read as it arrives.
type relay struct {
	req  *fasthttp.Request
	resp *fasthttp.Response
}

func (r *relay) Read(p []byte) (int, error) { return r.resp.BodyStream().Read(p) }

func (r *relay) Close() error {
	err := r.resp.CloseBodyStream()
	fasthttp.ReleaseRequest(r.req)
	fasthttp.ReleaseResponse(r.resp)
	return err
}
