package router

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"runtime/debug"
	"strconv"

	"frontdoor/adapters"
	"frontdoor/internal/reply"

	"github.com/valyala/fasthttp"
)

func (g *Gateway) handle(ctx *fasthttp.RequestCtx) {
	defer func() {
		if r := recover(); r != nil {
			g.log.Error("handler panicked", "path", string(ctx.Path()), "panic", fmt.Sprint(r), "stack", string(debug.Stack()))
			g.writeError(ctx, errInternal(""))
		}
	}()
	// A request whose body length two parsers could read differently, or
	// with fields after its chunked body, is refused before anything reads
	// a header (refuseFraming).
	if g.refuseFraming(ctx) {
		return
	}
	// Every answer carries X-Request-Id, whatever the route.
	id := requestID(ctx)
	ctx.Response.Header.SetCanonical(headerRequestID, []byte(id))
	// While draining, every answer closes its connection: a proxy that
	// pools keep-alive connections (nginx) opens new ones, which its
	// balancing sends elsewhere once this replica is gone, instead of
	// reusing one that this replica closes when the drain ends.
	if g.draining.Load() {
		ctx.SetConnectionClose()
	}
	switch string(ctx.Path()) {
	case "/v1/chat/completions":
		g.serveInference(ctx, adapters.EndpointChat, id)
	case "/v1/completions":
		g.serveInference(ctx, adapters.EndpointCompletion, id)
	case "/v1/responses":
		g.serveInference(ctx, adapters.EndpointResponses, id)
	case "/v1/embeddings":
		g.serveEmbeddings(ctx, id)
	case "/v1/models":
		if g.onlyMethod(ctx, fasthttp.MethodGet) {
			g.serveModels(ctx)
		}
	case "/healthz":
		if g.onlyMethod(ctx, fasthttp.MethodGet) {
			ctx.SetContentType("application/json")
			ctx.SetBodyString(`{"status":"ok"}`)
		}
	case "/readyz":
		if g.onlyMethod(ctx, fasthttp.MethodGet) {
			g.serveReady(ctx)
		}
	case "/metrics":
		if g.onlyMethod(ctx, fasthttp.MethodGet) {
			ctx.SetContentType("text/plain; version=0.0.4")
			g.metrics.write(ctx)
		}
	default:
		if bytes.HasPrefix(ctx.Path(), []byte("/v1/responses/")) {
			g.serveStored(ctx, id)
			return
		}
		if g.operator.Serve(ctx, g.rt.Load().admin) {
			return
		}
		if p := g.passthroughPattern(string(ctx.Path())); p != "" {
			g.servePassthrough(ctx, id, p)
			return
		}
		g.writeError(ctx, errUnknownPath(string(ctx.Path())))
	}
}

func (g *Gateway) onlyMethod(ctx *fasthttp.RequestCtx, method string) bool {
	return reply.OnlyMethod(ctx, method)
}

// handleTransportError answers requests fasthttp could not read, such as an
// oversize body, with the OpenAI envelope.
func (g *Gateway) handleTransportError(ctx *fasthttp.RequestCtx, err error) {
	ctx.Response.Header.SetCanonical(headerRequestID, []byte(requestID(ctx)))
	if errors.Is(err, fasthttp.ErrBodyTooLarge) {
		g.writeError(ctx, g.tooLarge())
		ctx.SetConnectionClose()
		return
	}
	var small *fasthttp.ErrSmallBuffer
	var ne net.Error
	switch {
	case errors.As(err, &small):
		g.writeError(ctx, errHeaderTooLarge())
	case errors.As(err, &ne) && ne.Timeout():
		g.writeError(ctx, errClientTimeout())
	default:
		g.writeError(ctx, adapters.BadRequest("", "malformed HTTP request"))
	}
	ctx.SetConnectionClose()
}

func (g *Gateway) tooLarge() *adapters.APIError {
	return errBodyTooLarge(int64(g.conf().Limits.MaxBodyBytes))
}

func (g *Gateway) serveReady(ctx *fasthttp.RequestCtx) {
	ctx.SetContentType("application/json")
	if g.stopping.Load() || g.draining.Load() {
		ctx.SetStatusCode(503)
		ctx.SetBodyString(`{"status":"stopping"}`)
		return
	}
	if g.pool.Ready() {
		ctx.SetBodyString(`{"status":"ready"}`)
		return
	}
	ctx.SetStatusCode(503)
	ctx.SetBodyString(`{"status":"no usable node"}`)
}

func (g *Gateway) writeError(ctx *fasthttp.RequestCtx, e *adapters.APIError) {
	reply.Error(ctx, e)
}

// requestID takes a sane client X-Request-Id or makes one.
func requestID(ctx *fasthttp.RequestCtx) string {
	if id := ctx.Request.Header.Peek("X-Request-Id"); len(id) > 0 && len(id) <= 128 && printable(id) {
		return string(id)
	}
	return newRequestID()
}

// newRequestID makes a request id.
func newRequestID() string {
	var b [16]byte
	v := rand.Uint64()
	for i := range 8 {
		b[2*i], b[2*i+1] = hexDigits[byte(v)>>4], hexDigits[byte(v)&15]
		v >>= 8
	}
	return string(b[:])
}

const hexDigits = "0123456789abcdef"

// smallInt is the decimal text of n, without allocating for small n.
func smallInt(n int) []byte {
	if n >= 0 && n < len(smallInts) {
		return smallInts[n]
	}
	return strconv.AppendInt(nil, int64(n), 10)
}

var smallInts = func() (t [16][]byte) {
	for i := range t {
		t[i] = strconv.AppendInt(nil, int64(i), 10)
	}
	return t
}()

func printable(b []byte) bool {
	for _, c := range b {
		if c < 0x21 || c > 0x7e {
			return false
		}
	}
	return true
}

func isJSON(ct []byte) bool {
	if i := bytes.IndexByte(ct, ';'); i >= 0 {
		ct = ct[:i]
	}
	ct = bytes.TrimSpace(ct)
	return bytes.EqualFold(ct, []byte("application/json"))
}

// serveModels lists the models the nodes serve (chat, completion and
// embedding models alike, discovered nodes' included) and the aliases,
// those the request's tenant may use: its allow-list applies here as on
// every other route.
func (g *Gateway) serveModels(ctx *fasthttp.RequestCtx) {
	t, apiErr := g.rt.Load().tenants.resolve(ctx)
	if apiErr != nil {
		g.writeError(ctx, apiErr)
		return
	}
	served, aliases := g.pool.Models()
	list := adapters.ModelList{Object: "list", Data: []adapters.Model{}}
	created := startTime.Unix()
	for _, m := range served {
		if t.allows(m) {
			list.Data = append(list.Data, adapters.Model{ID: m, Object: "model", Created: created, OwnedBy: "frontdoor"})
		}
	}
	for _, a := range aliases {
		if t.allows(a) {
			list.Data = append(list.Data, adapters.Model{ID: a, Object: "model", Created: created, OwnedBy: "frontdoor-alias"})
		}
	}
	b, _ := json.Marshal(list)
	ctx.SetContentType("application/json")
	ctx.SetBody(b)
}

// setUpstream says who answered (a node, or spill-over) after how many
// attempts of this request (0: it followed an identical one).
func setUpstream(h *fasthttp.ResponseHeader, upstream string, attempts int) {
	h.SetCanonical(headerUpstream, []byte(upstream))
	h.SetCanonical(headerUpstreamAttempts, smallInt(attempts))
}

// Response header names, canonical, for SetCanonical on the hot path.
var (
	headerUpstream         = []byte("X-Upstream")
	headerUpstreamAttempts = []byte("X-Upstream-Attempts")
	headerCache            = []byte("X-Cache")
	headerRequestID        = []byte("X-Request-Id")
)
