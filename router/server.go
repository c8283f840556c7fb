package router

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"runtime/debug"
	"slices"
	"strconv"

	"github.com/VictoriaMetrics/metrics"
	"github.com/valyala/fasthttp"

	"frontdoor/adapters"
	"frontdoor/balancer"
	"frontdoor/internal/reply"
	"frontdoor/internal/telemetry"
)

// conf returns the configuration in force.
func (g *Gateway) conf() *Config { return &g.rt.Load().cfg }

// handle routes a request of the main listener.
func (g *Gateway) handle(ctx *fasthttp.RequestCtx) {
	defer func() {
		if r := recover(); r != nil {
			g.log.Error("handler panicked", "path", string(ctx.Path()), "panic", fmt.Sprint(r), "stack", string(debug.Stack()))
			reply.Error(ctx, reply.Internal(""))
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
		if reply.OnlyMethod(ctx, fasthttp.MethodGet) {
			g.serveModels(ctx)
		}
	case "/healthz":
		if reply.OnlyMethod(ctx, fasthttp.MethodGet) {
			ctx.SetContentType("application/json")
			ctx.SetBodyString(`{"status":"ok"}`)
		}
	case "/readyz":
		if reply.OnlyMethod(ctx, fasthttp.MethodGet) {
			g.serveReady(ctx)
		}
	case "/metrics":
		if reply.OnlyMethod(ctx, fasthttp.MethodGet) {
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
		if p := passthroughPattern(g.conf().Passthrough.Paths, string(ctx.Path())); p != "" {
			g.servePassthrough(ctx, id, p)
			return
		}
		reply.Error(ctx, reply.UnknownPath(string(ctx.Path())))
	}
}

// handleTransportError answers requests fasthttp could not read, such as an
// oversize body, with the OpenAI envelope.
func (g *Gateway) handleTransportError(ctx *fasthttp.RequestCtx, err error) {
	ctx.Response.Header.SetCanonical(headerRequestID, []byte(requestID(ctx)))
	if errors.Is(err, fasthttp.ErrBodyTooLarge) {
		reply.Error(ctx, reply.BodyTooLarge(int64(g.conf().Limits.MaxBodyBytes)))
		ctx.SetConnectionClose()
		return
	}
	var small *fasthttp.ErrSmallBuffer
	var ne net.Error
	switch {
	case errors.As(err, &small):
		reply.Error(ctx, reply.HeaderTooLarge())
	case errors.As(err, &ne) && ne.Timeout():
		reply.Error(ctx, reply.ClientTimeout())
	default:
		reply.Error(ctx, adapters.BadRequest("", "malformed HTTP request"))
	}
	ctx.SetConnectionClose()
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

// judgeOnly reports whether every node configured with model serves it
// alone: a model served for the judge (cache.semantic.verify.judge_model)
// on nodes of its own, which /v1/models does not offer to clients.
func judgeOnly(pool *balancer.Pool, model string) bool {
	for _, n := range pool.Nodes() {
		if ms := n.Config().Models; slices.Contains(ms, model) && len(ms) > 1 {
			return false
		}
	}
	return true
}

// serveModels lists the models the nodes serve (chat, completion and
// embedding models alike, discovered nodes' included) and the aliases,
// those the request's tenant may use: its allow-list applies here as on
// every other route. A judge-only model (judgeOnly) is listed only to a
// tenant whose allow-list names it; a request for it still goes through.
func (g *Gateway) serveModels(ctx *fasthttp.RequestCtx) {
	t, apiErr := g.rt.Load().tenants.resolve(ctx)
	if apiErr != nil {
		reply.Error(ctx, apiErr)
		return
	}
	served, aliases := g.pool.Models()
	list := adapters.ModelList{Object: "list", Data: []adapters.Model{}}
	created := startTime.Unix()
	judge := g.conf().Cache.Semantic.Verify.JudgeModel
	for _, m := range served {
		if t.allows(m) && (m != judge || t.names(m) || !judgeOnly(g.pool, m)) {
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

// Refusals at the HTTP layer: what the header block alone condemns is
// answered before a handler reads a header and, for a request that sent
// Expect: 100-continue, before a 100 Continue invites its body.
const (
	refusedFraming  = "framing"          // adapters.CheckRequestFraming
	refusedTrailers = "trailers"         // fields after a chunked body
	refusedTooLarge = "expect_too_large" // Content-Length over the limit, before 100 Continue
	refusedAuth     = "expect_auth"      // no or a bad API key, before 100 Continue
	refusedOrigin   = "admin_origin"     // the admin listener: a browser acting for another site (browserOrigin)
)

// transportRefusals counts the refusals by reason
// (frontdoor_transport_refusals_total) and logs them, rate-limited.
type transportRefusals struct {
	log     *telemetry.RateLog
	counter map[string]*metrics.Counter
}

// refuse answers e with a close and counts it under reason.
func (g *Gateway) refuse(ctx *fasthttp.RequestCtx, id, reason string, e *adapters.APIError) {
	ctx.Response.Header.SetCanonical(headerRequestID, []byte(id))
	reply.Error(ctx, e)
	ctx.SetConnectionClose()
	r := g.metrics.refused
	r.counter[reason].Inc()
	r.log.Warn(reason, "http: request refused", "reason", reason, "status", e.Status,
		"path", string(ctx.Path()), "remote", ctx.RemoteIP().String(), "error", e.Message)
}

// refuseFraming refuses, with a 400 and a close, a request whose body
// length two parsers could read differently (adapters.CheckRequestFraming)
// or that sent fields after its chunked body (adapters.ErrTrailerFields:
// the server files them with the headers, where they would pass for
// headers a proxy in front checked). It reports whether it did. No header
// is read before it, not even X-Request-Id when trailer fields are about.
func (g *Gateway) refuseFraming(ctx *fasthttp.RequestCtx) bool {
	trailers := len(ctx.Request.Header.PeekTrailerKeys()) > 0 // announced or received
	err := adapters.CheckRequestFraming(ctx.Request.Header.RawHeaders())
	reason := refusedFraming
	if err == nil && trailers {
		err, reason = adapters.ErrTrailerFields, refusedTrailers
	}
	if err == nil {
		return false
	}
	id := newRequestID()
	if !trailers {
		id = requestID(ctx)
	}
	g.refuse(ctx, id, reason, adapters.BadRequest("", err.Error()))
	return true
}

// expectHandler is the server's ExpectHandler. It runs on a request that
// sent Expect: 100-continue once its headers are read, before its body
// is. What the headers alone condemn gets its final answer now, with a
// close and no 100 Continue, so the client never sends the body: a
// framing refusal (400); on the inference endpoints a missing or bad API
// key (401, as the handler would answer first) and a Content-Length over
// limits.max_body_bytes (413); elsewhere a Content-Length over the
// server's own cap (413). fasthttp writes ctx.Response as set here with
// the status returned, skips the handler and closes (TestFramingExpect
// holds the body to the OpenAI error). Chunked bodies, of unknown length,
// are sent and checked as they are read. On the admin listener (checkKey
// false) a request may act for any tenant without a key
// (tenantSet.resolve): the key is left to the handler.
func (g *Gateway) expectHandler(checkKey bool) func(ctx *fasthttp.RequestCtx) int {
	return func(ctx *fasthttp.RequestCtx) int {
		if g.refuseFraming(ctx) {
			return ctx.Response.StatusCode()
		}
		limit := g.server.MaxRequestBodySize
		var apiErr *adapters.APIError
		reason := refusedAuth
		if p := string(ctx.Path()); p == "/v1/chat/completions" || p == "/v1/completions" || p == "/v1/embeddings" || passthroughPattern(g.conf().Passthrough.Paths, p) != "" {
			limit = int(g.conf().Limits.MaxBodyBytes)
			if checkKey && ctx.IsPost() {
				_, apiErr = g.rt.Load().tenants.resolve(ctx)
			}
		}
		if apiErr == nil && ctx.Request.Header.ContentLength() > limit {
			apiErr, reason = reply.BodyTooLarge(int64(g.conf().Limits.MaxBodyBytes)), refusedTooLarge
		}
		if apiErr == nil {
			return fasthttp.StatusContinue
		}
		g.refuse(ctx, requestID(ctx), reason, apiErr)
		return apiErr.Status
	}
}
