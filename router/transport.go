package router

import (
	"log/slog"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/valyala/fasthttp"

	"frontdoor/adapters"
)

// Refusals at the HTTP layer: what the header block alone condemns is
// answered before a handler reads a header.
const (
	refusedFraming  = "framing"  // adapters.CheckRequestFraming
	refusedTrailers = "trailers" // fields after a chunked body
)

// transportRefusals counts the refusals by reason
// (frontdoor_transport_refusals_total) and logs them, rate-limited.
type transportRefusals struct {
	log     *rateLog
	counter map[string]*metrics.Counter
}

func newTransportRefusals(set *metrics.Set, log *slog.Logger) *transportRefusals {
	r := &transportRefusals{log: newRateLog(log, 10*time.Second), counter: map[string]*metrics.Counter{}}
	for _, reason := range []string{refusedFraming, refusedTrailers} {
		r.counter[reason] = set.NewCounter(`frontdoor_transport_refusals_total{reason="` + reason + `"}`)
	}
	return r
}

// refuse answers e with a close and counts it under reason.
func (g *Gateway) refuse(ctx *fasthttp.RequestCtx, id, reason string, e *adapters.APIError) {
	ctx.Response.Header.SetCanonical(headerRequestID, []byte(id))
	g.writeError(ctx, e)
	ctx.SetConnectionClose()
	r := g.metrics.refused
	r.counter[reason].Inc()
	r.log.warn(reason, "http: request refused", "reason", reason, "status", e.Status,
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
