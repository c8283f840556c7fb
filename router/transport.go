package router

import (
	"github.com/VictoriaMetrics/metrics"
	"github.com/valyala/fasthttp"

	"frontdoor/adapters"
	"frontdoor/internal/telemetry"
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
	g.writeError(ctx, e)
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

// handleExpect is the server's ExpectHandler. It runs on a request that
// sent Expect: 100-continue once its headers are read, before its body
// is. What the headers alone condemn gets its final answer now, with a
// close and no 100 Continue, so the client never sends the body: a
// framing refusal (400); on the inference endpoints a missing or bad API
// key (401, as the handler would answer first) and a Content-Length over
// limits.max_body_bytes (413); elsewhere a Content-Length over the
// server's own cap (413). fasthttp writes ctx.Response as set here with
// the status returned, skips the handler and closes (TestFramingExpect
// holds the body to the OpenAI error). Chunked bodies, of unknown length,
// are sent and checked as they are read.
func (g *Gateway) handleExpect(ctx *fasthttp.RequestCtx) int { return g.answerExpect(ctx, true) }

// handleAdminExpect is handleExpect on the admin listener, where a request
// may act for any tenant without a key (tenantSet.resolve): the key is
// left to the handler.
func (g *Gateway) handleAdminExpect(ctx *fasthttp.RequestCtx) int { return g.answerExpect(ctx, false) }

// answerExpect returns the status for handleExpect; checkKey: refuse a
// missing or bad API key on the inference endpoints.
func (g *Gateway) answerExpect(ctx *fasthttp.RequestCtx, checkKey bool) int {
	if g.refuseFraming(ctx) {
		return ctx.Response.StatusCode()
	}
	limit := g.server.MaxRequestBodySize
	var apiErr *adapters.APIError
	reason := refusedAuth
	if p := string(ctx.Path()); p == "/v1/chat/completions" || p == "/v1/completions" || p == "/v1/embeddings" || g.passthroughPattern(p) != "" {
		limit = int(g.conf().Limits.MaxBodyBytes)
		if checkKey && ctx.IsPost() {
			_, apiErr = g.rt.Load().tenants.resolve(ctx)
		}
	}
	if apiErr == nil && ctx.Request.Header.ContentLength() > limit {
		apiErr, reason = g.tooLarge(), refusedTooLarge
	}
	if apiErr == nil {
		return fasthttp.StatusContinue
	}
	g.refuse(ctx, requestID(ctx), reason, apiErr)
	return apiErr.Status
}
