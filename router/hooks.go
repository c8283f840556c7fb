package router

import (
	"github.com/valyala/fasthttp"

	"frontdoor/adapters"
	"frontdoor/balancer"
	"frontdoor/router/reuse"
)

// requestHooks are the points of a request's life a feature attaches to
// (the Responses API's state: responsesFeature). The main path calls each
// one unconditionally; a hook that has nothing to do for a request lets it
// pass unchanged.
type requestHooks interface {
	// beforeLookup runs once the request is parsed and its model
	// resolved, before the cache plans for it. ok false: the hook wrote
	// the answer (an error) and the request stops there. bypass is a
	// reason the cache must neither answer nor store the request
	// (reuse.ReasonNone: none).
	beforeLookup(ctx *fasthttp.RequestCtx, x *exchange) (bypass reuse.Reason, ok bool)
	// pick may narrow or reorder the candidate nodes, best first.
	pick(x *exchange, cands []*balancer.Node) []*balancer.Node
	// streamTap is what sees each event of x's relayed stream; nil: none.
	streamTap(x *exchange) eventTap
	// answered sees a whole (JSON) answer of a node or the hosted API.
	answered(x *exchange, body []byte)
	// replayed sees an answer replayed from the cache under a fresh id
	// and created time.
	replayed(x *exchange, id string, created int64, a *adapters.Answer)
}

// eventTap sees the events of a relayed stream as the pump passes them on.
type eventTap interface {
	see(ev *adapters.SSEEvent)
	// usage is the usage the stream's events carried, when they did.
	usage() (u adapters.Usage, known bool)
}

var _ requestHooks = (*responsesFeature)(nil)
