package router

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"runtime/debug"
	"sort"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/pprofhandler"
	"github.com/valyala/fastjson"
	"go.opentelemetry.io/otel/trace"

	"frontdoor/adapters"
	"frontdoor/balancer"
	"frontdoor/router/admission"
)

func (g *Gateway) handle(ctx *fasthttp.RequestCtx) {
	defer func() {
		if r := recover(); r != nil {
			g.log.Error("handler panicked", "path", string(ctx.Path()), "panic", fmt.Sprint(r), "stack", string(debug.Stack()))
			g.writeError(ctx, &adapters.APIError{Status: 500, Type: adapters.TypeServer, Code: "internal_error", Message: "internal error"})
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
	switch string(ctx.Path()) {
	case "/v1/chat/completions":
		g.serveInference(ctx, adapters.EndpointChat, id)
	case "/v1/completions":
		g.serveInference(ctx, adapters.EndpointCompletion, id)
	case "/v1/models":
		if g.onlyMethod(ctx, fasthttp.MethodGet) {
			ctx.SetContentType("application/json")
			ctx.SetBody(g.rt.Load().models)
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
	case "/status":
		g.serveStatus(ctx)
	case "/dashboard":
		g.serveDashboard(ctx)
	case "/metrics":
		if g.onlyMethod(ctx, fasthttp.MethodGet) {
			ctx.SetContentType("text/plain; version=0.0.4")
			g.metrics.write(ctx)
		}
	default:
		if bytes.HasPrefix(ctx.Path(), []byte("/admin/")) || string(ctx.Path()) == "/admin" {
			g.serveAdmin(ctx)
			return
		}
		if bytes.HasPrefix(ctx.Path(), []byte("/debug/pprof/")) {
			if g.rt.Load().admin.allow(ctx, g.writeError) {
				pprofhandler.PprofHandler(ctx)
			}
			return
		}
		g.writeError(ctx, &adapters.APIError{Status: 404, Type: adapters.TypeNotFound, Code: "unknown_url",
			Message: "unknown path " + strconv.Quote(string(ctx.Path()))})
	}
}

func (g *Gateway) onlyMethod(ctx *fasthttp.RequestCtx, method string) bool {
	if string(ctx.Method()) == method || (method == fasthttp.MethodGet && ctx.IsHead()) {
		return true
	}
	ctx.Response.Header.Set(fasthttp.HeaderAllow, method)
	g.writeError(ctx, &adapters.APIError{Status: 405, Type: adapters.TypeInvalidRequest, Code: "method_not_allowed",
		Message: "method " + string(ctx.Method()) + " is not allowed on " + string(ctx.Path()) + "; use " + method})
	return false
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
		g.writeError(ctx, &adapters.APIError{Status: 431, Type: adapters.TypeInvalidRequest, Code: "request_header_too_large",
			Message: "request line and headers exceed 16 KiB"})
	case errors.As(err, &ne) && ne.Timeout():
		g.writeError(ctx, &adapters.APIError{Status: 408, Type: adapters.TypeInvalidRequest, Code: "request_timeout",
			Message: "request not received within timeouts.client"})
	default:
		g.writeError(ctx, adapters.BadRequest("", "malformed HTTP request"))
	}
	ctx.SetConnectionClose()
}

func (g *Gateway) tooLarge() *adapters.APIError {
	return &adapters.APIError{Status: 413, Type: adapters.TypeInvalidRequest, Code: "request_too_large",
		Message: "request body exceeds limits.max_body_bytes (" + strconv.FormatInt(int64(g.conf().Limits.MaxBodyBytes), 10) + " bytes)"}
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
	ctx.Response.ResetBody()
	ctx.SetStatusCode(e.Status)
	ctx.SetContentType("application/json")
	if e.RetryAfter > 0 {
		ctx.Response.Header.Set(fasthttp.HeaderRetryAfter, strconv.Itoa(e.RetryAfter))
	}
	ctx.Response.SetBodyRaw(e.AppendJSON(nil))
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

// exchange is one inference request as it moves through the gateway.
type exchange struct {
	start        time.Time
	id           string
	endpoint     adapters.Endpoint
	req          *adapters.Request
	tenant       *tenant
	model        string // after alias resolution
	upstream     string
	attempts     int
	status       int
	cacheResult  string // X-Cache value; "" when the cache was not consulted
	cacheReason  string
	spillRefused bool              // spill-over would have applied but the tenant may not leave
	pass         *admission.Pass   // the tenant's rate and concurrency admission
	charge       *admission.Charge // the token charge of a miss
	streamOwned  bool              // a stream writer settles and releases at its end
	streamEvents int               // events pumped to the client, for the per-token time
	slot         heldSlot          // the node or spill-over slot of the current attempt
	plan         *cachePlan
	flight       *flight
	finished     bool                     // finish ran
	tries        attempts                 // where forward stands
	prefix       *balancer.Prefix         // the prompt's prefix hashes (prefix weight > 0)
	prefixDone   bool                     // prefix was computed
	upstreamReq  adapters.UpstreamRequest // what toUpstream built
	trc          *requestTrace            // nil when tracing is off
}

func (g *Gateway) serveInference(ctx *fasthttp.RequestCtx, ep adapters.Endpoint, id string) {
	x := &exchange{start: time.Now(), id: id, endpoint: ep}
	if g.tracing != nil {
		g.startRequestSpan(ctx, x)
	}
	defer func() { g.finish(ctx, x, recover()) }()
	ur, leader := g.prepare(ctx, x)
	if leader != nil {
		ur = g.rejoin(ctx, x, leader)
	}
	if ur != nil {
		g.forward(ctx, x, ur)
	}
}

// prepare runs a request up to its trip upstream: it validates, admits and
// looks it up in the cache. It returns the upstream request, or nil when
// the client has its answer already, or the flight of an identical request
// in progress that x must follow (see rejoin).
func (g *Gateway) prepare(ctx *fasthttp.RequestCtx, x *exchange) (*adapters.UpstreamRequest, *flight) {
	if !g.admitAndPlan(ctx, x) {
		return nil, nil
	}
	if p := x.plan; p.lookup && g.lookup(ctx, x, p) {
		return nil, nil
	}
	if x.plan.only != 0 { // lookup-only: never upstream
		ctx.SetStatusCode(fasthttp.StatusNoContent)
		x.cacheResult, x.cacheReason = cacheMiss, "lookup_only"
		return nil, nil
	}
	return g.prepareMiss(ctx, x)
}

// admitAndPlan validates and admits the request and plans its cache use
// (x.plan). It returns false when the client has its answer (an error).
func (g *Gateway) admitAndPlan(ctx *fasthttp.RequestCtx, x *exchange) bool {
	if !ctx.IsPost() {
		g.onlyMethod(ctx, fasthttp.MethodPost)
		return false
	}
	t, apiErr := g.rt.Load().tenants.resolve(ctx)
	if apiErr != nil {
		g.writeError(ctx, apiErr)
		return false
	}
	x.tenant = t
	as := x.child("admission", trace.SpanKindInternal)
	pass, rej := g.adm.Enter(context.Background(), t.name)
	endAdmission(as, rej)
	if rej != nil {
		g.writeError(ctx, rejection(rej))
		return false
	}
	x.pass = pass
	if !isJSON(ctx.Request.Header.ContentType()) {
		g.writeError(ctx, &adapters.APIError{Status: 415, Type: adapters.TypeInvalidRequest, Code: "unsupported_media_type",
			Message: "Content-Type must be application/json, got " + strconv.Quote(string(ctx.Request.Header.ContentType()))})
		return false
	}
	if len(ctx.PostBody()) > int(g.conf().Limits.MaxBodyBytes) {
		g.writeError(ctx, g.tooLarge())
		return false
	}
	req, apiErr := adapters.ParseRequest(x.endpoint, ctx.PostBody())
	if apiErr != nil {
		g.bodies.note(x, apiErr)
		g.writeError(ctx, apiErr)
		return false
	}
	x.req = req // finish releases it
	x.describeRequest()
	if !t.allows(req.Model) {
		g.writeError(ctx, &adapters.APIError{Status: 403, Type: adapters.TypePermission, Code: "model_not_allowed", Param: "model",
			Message: "tenant " + strconv.Quote(t.name) + " may not use model " + strconv.Quote(req.Model)})
		return false
	}
	model, ok := g.pool.Resolve(req.Model, x.id)
	if !ok {
		g.writeError(ctx, adapters.NotFound("model", "The model `"+req.Model+"` does not exist"))
		return false
	}
	x.model = model
	p := g.planCache(ctx, x)
	x.plan = p
	x.cacheResult, x.cacheReason = cacheBypass, p.reason
	return true
}

// prepareMiss readies a cache miss for the trip upstream: it leads (or
// follows, see rejoin) the flight of identical requests and admits it.
func (g *Gateway) prepareMiss(ctx *fasthttp.RequestCtx, x *exchange) (*adapters.UpstreamRequest, *flight) {
	if p := x.plan; p.store {
		g.semanticScope(x, p) // the write-back needs it; the request is gone by then
		if !p.lookupFailed {
			x.cacheResult = cacheMiss // else a bypass whose answer is still written back
		}
		if g.conf().Cache.Coalesce && p.lookup { // no-cache wants a fresh answer of its own
			f, leader := g.flights.join(p.keys.Exact)
			if !leader {
				return nil, f
			}
			x.flight = f
		} else {
			x.flight = g.flights.solo(p.keys.Exact)
		}
		ctx.Response.Header.Set("X-Cache-Entry", x.flight.entryID)
	}
	return g.toUpstream(ctx, x), nil
}

// rejoin waits for the flight f of an identical request and serves its
// answer; when f got none, x goes upstream itself. It blocks.
func (g *Gateway) rejoin(ctx *fasthttp.RequestCtx, x *exchange, f *flight) *adapters.UpstreamRequest {
	if g.follow(ctx, x, f) {
		return nil
	}
	x.flight = g.flights.solo(x.plan.keys.Exact) // the leader failed: go alone
	ctx.Response.Header.Del("X-Coalesced")
	ctx.Response.Header.Set("X-Cache-Entry", x.flight.entryID)
	return g.toUpstream(ctx, x)
}

// toUpstream admits a miss and builds its upstream request (nil: refused,
// the error is written).
func (g *Gateway) toUpstream(ctx *fasthttp.RequestCtx, x *exchange) *adapters.UpstreamRequest {
	if !g.admitMiss(ctx, x) {
		g.failFlight(x)
		return nil
	}
	req, model := x.req, x.model
	body := req.Body
	switch {
	case req.Stream && !req.IncludeUsage:
		// Ask for the usage chunk (settlement, token metrics, the cache);
		// the pump strips it again for this client.
		if model != req.Model {
			req.Root().Set("model", new(fastjson.Arena).NewString(model))
		}
		body = withIncludeUsage(req.Root())
	case model != req.Model:
		body = rewriteModel(req.Root(), model)
	}
	x.upstreamReq = adapters.UpstreamRequest{Endpoint: x.endpoint, Body: body, Stream: req.Stream, RequestID: x.id, Model: model}
	return &x.upstreamReq
}

func rejection(r *admission.Rejection) *adapters.APIError {
	return &adapters.APIError{Status: 429, Type: adapters.TypeRateLimit, Code: r.Limit, Message: r.Message, RetryAfter: r.RetryAfterSeconds()}
}

// admitMiss charges a request that is going upstream against the token and
// global budgets, after checking it fits the model's context window. It
// writes the error and returns false when the request may not go on.
func (g *Gateway) admitMiss(ctx *fasthttp.RequestCtx, x *exchange) bool {
	req := x.req
	maxLen := g.rt.Load().maxModelLen[x.model]
	promptTokens := 0
	if maxLen > 0 || g.adm.CountsTokens(x.tenant.name) {
		promptTokens = admission.CountTokens(req.PromptText())
	}
	if maxLen > 0 && promptTokens+req.MaxTokens > maxLen {
		g.writeError(ctx, adapters.BadRequest("messages", fmt.Sprintf(
			"This model's maximum context length is %d tokens. However, you requested %d tokens (%d in the messages, %d in the completion). Please reduce the length of the messages or completion.",
			maxLen, promptTokens+req.MaxTokens, promptTokens, req.MaxTokens)))
		return false
	}
	as := x.child("admission tokens", trace.SpanKindInternal)
	charge, rej := g.adm.AdmitMiss(context.Background(), x.tenant.name, g.adm.UpfrontTokens(promptTokens, req.MaxTokens, req.N))
	endAdmission(as, rej)
	if rej != nil {
		g.writeError(ctx, rejection(rej))
		return false
	}
	x.charge = charge
	return true
}

// handOff moves the admission release and the settlement to a stream
// writer, which calls the returned func when the stream ends with the
// total tokens used (negative: unknown).
func (x *exchange) handOff() func(usage int) {
	x.streamOwned = true
	pass, charge, trc := x.pass, x.charge, x.trc
	return func(usage int) {
		if charge != nil {
			charge.Settle(usage)
		}
		pass.Release()
		trc.end()
	}
}

// rewriteModel re-encodes the request with another model name. Only alias
// resolution pays for this; plain requests are forwarded byte for byte.
func rewriteModel(root *fastjson.Value, model string) []byte {
	var arena fastjson.Arena
	root.Set("model", arena.NewString(model))
	return adapters.AppendJSONValue(nil, root)
}

// attempts is how far forward has got through the candidate nodes.
type attempts struct {
	cands      []*balancer.Node // ordered by the picker
	next       int              // index of the next candidate to try
	lastErr    *adapters.APIError
	lastReason string // why the last attempt failed, for the retry metric
	final      bool   // lastErr is the answer: no other node, no spill-over
}

// forward tries the candidate nodes in order until one answers. Failures
// before the first byte move on to the next (different) node.
func (g *Gateway) forward(ctx *fasthttp.RequestCtx, x *exchange, ur *adapters.UpstreamRequest) {
	st := g.candidates(x)
	if maxWait := g.conf().Balancer.Queue.MaxWait.D(); maxWait > 0 && !anyFree(st.cands) && g.pool.AnyUsable(x.model) {
		// Every node is full: wait for a slot before spilling over or
		// answering 503.
		deadline := time.Now().Add(maxWait)
		for !anyFree(st.cands) && time.Now().Before(deadline) {
			if !g.pool.WaitForSlot(context.Background(), x.model, time.Until(deadline)) {
				break
			}
			st = g.candidates(x)
		}
	}
	g.forwardFrom(ctx, x, ur, st)
}

func (g *Gateway) candidates(x *exchange) *attempts {
	if !x.prefixDone {
		x.prefix, x.prefixDone = requestPrefix(g.pool.PrefixHasher(), x.req), true
	}
	cands, _ := g.pool.PickWith(x.model, balancer.Hints{Affinity: systemPromptHash(x.req), Prefix: x.prefix})
	x.tries = attempts{cands: cands, lastReason: "other"}
	return &x.tries
}

// forwardFrom is forward from where st stands.
func (g *Gateway) forwardFrom(ctx *fasthttp.RequestCtx, x *exchange, ur *adapters.UpstreamRequest, st *attempts) {
	for {
		n := g.nextNode(x, st)
		if n == nil {
			break
		}
		if x.attempts > 0 {
			g.metrics.retries[st.lastReason].Inc()
			time.Sleep(g.backoff(x.attempts))
		}
		x.attempts++
		be := g.backendFor(n)
		var sent time.Time
		if ur.Stream { // the time to the first token is only known for streams
			sent = time.Now()
		}
		var span trace.Span
		if x.trc != nil {
			span = g.startAttempt(x, ur, n)
		}
		resp, err := be.Send(context.Background(), ur)
		if span != nil {
			endAttempt(span, resp, err, sent)
		}
		if g.answered(x, n, be, st, resp, err, sent) {
			g.commit(ctx, x, n, be, resp)
			return
		}
		if st.final {
			g.failFlight(x)
			g.writeError(ctx, st.lastErr)
			return
		}
	}
	g.noAnswer(ctx, x, ur, st)
}

// nextNode takes a slot on the next candidate that has one free, or
// returns nil when none is left or the attempts are used up. The slot is
// released on every path (finish releases it too, panics included).
func (g *Gateway) nextNode(x *exchange, st *attempts) *balancer.Node {
	for st.next < len(st.cands) && x.attempts < 1+g.conf().Balancer.Retries {
		n := st.cands[st.next]
		st.next++
		if n.TryAcquire() {
			x.slot.hold(n, nil)
			g.pool.Routed(n, x.prefix)
			return n
		}
	}
	return nil
}

// answered judges an attempt on node n: true when resp is the answer to
// commit; false when it failed before the first byte (the slot is then
// released and st says why), so the next candidate may be tried.
func (g *Gateway) answered(x *exchange, n *balancer.Node, be adapters.Backend, st *attempts, resp *adapters.UpstreamResponse, err error, sent time.Time) bool {
	if err != nil {
		x.slot.release()
		st.lastErr, st.lastReason = sendError(n.Name(), err), retryReason(err, 0)
		if errors.Is(err, adapters.ErrAnswerTooLarge) {
			// The node works; another would most likely answer as much.
			g.pool.Report(n, balancer.OutcomeSuccess, 0)
			st.final = true
			g.badAnswer(x.id, n.Name(), err)
			return false
		}
		g.pool.Report(n, balancer.OutcomeFailure, 0)
		if !g.badAnswer(x.id, n.Name(), err) {
			g.log.Warn("upstream attempt failed", "request_id", x.id, "node", n.Name(), "error", err.Error())
		}
		return false
	}
	if adapters.RetryableStatus(resp.Status) {
		st.lastErr, st.lastReason = be.MapError(resp.Status, resp.Body), retryReason(nil, resp.Status)
		resp.Close()
		x.slot.release()
		g.pool.Report(n, balancer.OutcomeFailure, 0)
		g.log.Warn("upstream attempt refused", "request_id", x.id, "node", n.Name(), "status", resp.Status)
		return false
	}
	// Time to first token is only known for streams: a non-streaming
	// answer arrives whole.
	var ttft time.Duration
	if resp.Streaming() {
		ttft = time.Since(sent)
		g.metrics.ttft.add(sent.Add(ttft), ttft)
	}
	g.pool.Report(n, balancer.OutcomeSuccess, ttft)
	g.metrics.upstreamAnswers.Add(1)
	x.upstream = n.Name()
	return true
}

// noAnswer spills the request over, or answers the error of the last
// attempt, when no node answered.
func (g *Gateway) noAnswer(ctx *fasthttp.RequestCtx, x *exchange, ur *adapters.UpstreamRequest, st *attempts) {
	reason := "failed"
	if x.attempts == 0 {
		reason = "saturated"
	}
	if g.trySpill(ctx, x, ur, reason) {
		return
	}
	lastErr := st.lastErr
	switch {
	case x.spillRefused:
		lastErr = adapters.Unavailable("no local capacity for "+x.model+", and this tenant's traffic may not leave for the hosted API; retry shortly", 1)
	case lastErr == nil && !g.pool.AnyUsable(x.model):
		lastErr = adapters.Unavailable("no healthy node serves "+x.model+" right now; retry shortly", 1)
	case lastErr == nil:
		lastErr = adapters.Unavailable("all nodes serving "+x.model+" are at capacity; retry shortly", 1)
	}
	g.failFlight(x)
	g.writeError(ctx, lastErr)
}

// anyFree reports whether some candidate has a free slot.
func anyFree(cands []*balancer.Node) bool {
	for _, n := range cands {
		if n.Inflight() < int64(n.Config().MaxConcurrency) {
			return true
		}
	}
	return false
}

// systemPromptHash is the affinity key: requests sharing a system prompt go
// to the node whose prefix cache may already hold it. 0 when there is none.
func systemPromptHash(req *adapters.Request) uint64 {
	msgs := req.Root().GetArray("messages")
	if len(msgs) == 0 || string(msgs[0].GetStringBytes("role")) != "system" {
		return 0
	}
	h := fnv.New64a()
	_, _ = h.Write(msgs[0].GetStringBytes("content"))
	return h.Sum64() | 1
}

// requestPrefix feeds the prompt to h, message by message (role, then the
// text content), for the prefix scorer. nil when h is (prefix weight 0).
func requestPrefix(h *balancer.PrefixHasher, req *adapters.Request) *balancer.Prefix {
	if h == nil {
		return nil
	}
	root := req.Root()
	if req.Endpoint == adapters.EndpointCompletion {
		h.Message(nil)
		if p := root.Get("prompt"); p != nil && p.Type() == fastjson.TypeString {
			h.Write(p.GetStringBytes())
		} else {
			for _, it := range p.GetArray() {
				h.Write(it.GetStringBytes())
			}
		}
		return h.Prefix()
	}
	for _, m := range root.GetArray("messages") {
		h.Message(m.GetStringBytes("role"))
		c := m.Get("content")
		if c != nil && c.Type() == fastjson.TypeString {
			h.Write(c.GetStringBytes())
			continue
		}
		for _, part := range c.GetArray() {
			h.Write(part.GetStringBytes("text"))
		}
	}
	return h.Prefix()
}

// failFlight tells the followers of x's flight that it got no answer.
func (g *Gateway) failFlight(x *exchange) {
	if f := x.flight; f != nil {
		f.failed = true
		close(f.ready)
		g.flights.leave(f)
		x.flight = nil
	}
}

// trySpill sends the request to the hosted API when the policy allows it,
// and reports whether it answered the client (with the hosted answer or an
// error of its own).
func (g *Gateway) trySpill(ctx *fasthttp.RequestCtx, x *exchange, ur *adapters.UpstreamRequest, reason string) bool {
	s := g.rt.Load().spill
	if s == nil || (reason == "saturated" && !s.onSat) || (reason == "failed" && !s.onFail) {
		return false
	}
	if !x.tenant.spillover {
		x.spillRefused = true
		return false
	}
	maxTokens := x.req.MaxTokens
	if maxTokens == 0 {
		maxTokens = g.conf().Admission.DefaultMaxTokens
	}
	if wait, limit := s.take(len(ur.Body)/4 + maxTokens); wait > 0 {
		g.failFlight(x)
		g.writeError(ctx, &adapters.APIError{Status: 429, Type: adapters.TypeRateLimit, Code: limit, RetryAfter: ceilSeconds(wait),
			Message: "local capacity is full and the hosted API's quota (" + limit + ") is used up; retry after the Retry-After delay"})
		return true
	}
	s.inflight.Add(1)
	x.slot.hold(nil, s.inflight)
	x.attempts++
	var span trace.Span
	if x.trc != nil {
		span = g.startAttempt(x, ur, nil)
	}
	resp, err := s.backend.Send(context.Background(), ur)
	if span != nil {
		endAttempt(span, resp, err, time.Time{})
	}
	if err != nil {
		x.slot.release()
		g.failFlight(x)
		g.badAnswer(x.id, s.name, err)
		g.writeError(ctx, sendError(s.name, err))
		return true
	}
	x.upstream = s.name
	s.count(reason, x.model)
	s.spilled.Add(1)
	ctx.Response.Header.Set("X-Upstream-Model", resp.Model)
	if resp.Status == 429 {
		s.throttled()
		e := s.backend.MapError(resp.Status, resp.Body)
		e.RetryAfter = 1
		if ra, err := strconv.Atoi(string(resp.RetryAfter)); err == nil && ra > 0 {
			e.RetryAfter = ra
		}
		resp.Close()
		x.slot.release()
		ctx.Response.Header.Set("X-Upstream", s.name)
		g.failFlight(x)
		g.writeError(ctx, e)
		return true
	}
	g.commit(ctx, x, nil, s.backend, resp)
	return true
}

func ceilSeconds(d time.Duration) int {
	s := int((d + time.Second - 1) / time.Second)
	return max(s, 1)
}

func (g *Gateway) backoff(attempt int) time.Duration {
	base, maxD := g.conf().Balancer.Backoff.Base.D(), g.conf().Balancer.Backoff.Max.D()
	if base <= 0 {
		return 0
	}
	d := base << (attempt - 1)
	if d > maxD || d <= 0 {
		d = maxD
	}
	return d/2 + rand.N(d/2+1) // equal jitter
}

// retryReason names why an attempt failed, for frontdoor_retries_total.
func retryReason(err error, status int) string {
	switch {
	case errors.Is(err, adapters.ErrConnect):
		return "connect"
	case errors.Is(err, adapters.ErrFirstByteTimeout), errors.Is(err, adapters.ErrTotalTimeout):
		return "timeout"
	case errors.Is(err, adapters.ErrUpstreamClosed):
		return "closed"
	case errors.Is(err, adapters.ErrMalformedAnswer):
		return "malformed"
	case status == 429:
		return "status_429"
	case status >= 500:
		return "status_5xx"
	}
	return "other"
}

func sendError(node string, err error) *adapters.APIError {
	switch {
	case errors.Is(err, adapters.ErrFirstByteTimeout):
		return adapters.UpstreamTimeout("upstream " + node + " did not answer in time (timeouts.first_byte)")
	case errors.Is(err, adapters.ErrTotalTimeout):
		return adapters.UpstreamTimeout("upstream " + node + " did not answer in time: " + err.Error())
	}
	return adapters.UpstreamError("upstream " + node + " failed: " + err.Error())
}

// badAnswer makes an answer the gateway would not pass on loud: a metric
// and a WARN line naming the node, at most one per node and kind every
// 10 s (never the body). It reports whether err was such an answer.
func (g *Gateway) badAnswer(id, node string, err error) bool {
	kind := ""
	switch {
	case errors.Is(err, adapters.ErrAnswerTooLarge):
		kind = "too_large"
	case errors.Is(err, adapters.ErrMalformedAnswer):
		kind = "malformed"
	default:
		return false
	}
	g.metrics.badAnswers[kind].Inc()
	g.upLog.warn(kind+":"+node, "upstream answer refused", "reason", kind, "node", node, "request_id", id, "error", err.Error())
	return true
}

// commit sends the answer of x.upstream (node, or spill-over when node is
// nil) to the client, and hands it to the flight (followers, write-back)
// when there is one.
func (g *Gateway) commit(ctx *fasthttp.RequestCtx, x *exchange, node *balancer.Node, be adapters.Backend, resp *adapters.UpstreamResponse) {
	h := &ctx.Response.Header
	h.SetCanonical(headerUpstream, []byte(x.upstream))
	h.SetCanonical(headerUpstreamAttempts, smallInt(x.attempts))
	f := x.flight
	if f != nil {
		f.upstream, f.attempts = x.upstream, x.attempts
	}
	if resp.Status >= 400 {
		e := be.MapError(resp.Status, resp.Body)
		resp.Close()
		x.slot.release()
		g.failFlight(x)
		g.writeError(ctx, e)
		return
	}
	if !resp.Streaming() {
		if resp.Converted {
			g.metrics.badAnswers["sse_converted"].Inc()
			g.upLog.warn("sse_converted:"+x.upstream, "upstream answered a non-streaming request with an event stream; converted to JSON",
				"node", x.upstream, "request_id", x.id)
		}
		ctx.SetStatusCode(resp.Status)
		ctx.Response.Header.SetContentTypeBytes(resp.ContentType)
		ctx.SetBody(resp.Body)
		var answer *adapters.Answer
		if f != nil {
			if a, err := adapters.ParseAnswer(x.endpoint, resp.Body); err == nil {
				answer = a
			}
		}
		if answer != nil && answer.Usage.TotalTokens > 0 {
			g.settle(x, answer.Usage, true)
		} else { // no usage in the answer (a converted stream may have none)
			u, ok := adapters.ParseUsage(resp.Body)
			g.settle(x, u, ok)
		}
		if f != nil {
			f.status, f.contentType, f.body = resp.Status, append([]byte(nil), resp.ContentType...), append([]byte(nil), resp.Body...)
			f.finish(answer, answer == nil)
			close(f.ready)
			go g.writeBack(f, x.plan, answer)
		}
		resp.Close()
		x.slot.release()
		return
	}
	first := time.Now()
	release := func() {
		if node != nil && x.streamEvents > 1 {
			g.pool.ReportTokens(node, x.streamEvents-1, time.Since(first))
		}
		x.slot.release()
	}
	ctx.SetStatusCode(resp.Status)
	ctx.SetContentType("text/event-stream")
	h.Set(fasthttp.HeaderCacheControl, "no-cache")
	h.Set("X-Accel-Buffering", "no")
	var asm *adapters.Assembler // the whole answer, for the cache
	if f != nil {
		f.streaming, f.status = true, resp.Status
		close(f.ready)
		asm = adapters.NewAssembler(x.endpoint)
	}
	done := x.handOff()
	tenantName := x.tenant.name
	wantUsage := x.req.IncludeUsage
	id, plan, upstream := x.id, x.plan, x.upstream
	g.streams.Add(1)
	g.live.add(resp)
	g.metrics.streams.Add(1)
	setStreamBody(ctx, func(w flushWriter) {
		r := pumped{broken: true, cut: notStoredCut} // until the pump returns (it may panic)
		defer func() {
			if r := recover(); r != nil {
				g.log.Error("stream pump panicked", "request_id", id, "panic", r)
			}
			g.live.remove(resp)
			resp.Close()
			release()
			g.metrics.streams.Add(-1)
			g.streams.Done()
			var answer *adapters.Answer
			if asm != nil {
				why := r.cut
				if why == "" {
					var err error
					answer, err = asm.Answer()
					why = notStoredReason(err)
				}
				if why != "" {
					g.notStored(id, upstream, why)
				}
			}
			if answer != nil {
				r.usage, r.usageKnown = answer.Usage, true
			}
			usage := -1
			if r.usageKnown && !r.broken {
				usage = r.usage.TotalTokens
				g.metrics.countTokens(tenantName, "upstream", r.usage.PromptTokens, r.usage.CompletionTokens)
				x.trc.usage(r.usage)
			}
			done(usage)
			if f != nil {
				f.finish(answer, r.broken)
				go g.writeBack(f, plan, answer)
			}
		}()
		r = g.pump(w, id, resp, f, asm, wantUsage)
		x.streamEvents = r.events
	})
}

// Why a stream's answer was not stored, for
// frontdoor_cache_writes_dropped_total{reason}: the node reported an error
// in it, it ended without [DONE] or a finish_reason, reading it failed
// (idle, total, the connection), or every reader left and so the gateway
// stopped reading.
const (
	notStoredError      = "stream_error"
	notStoredIncomplete = "stream_incomplete"
	notStoredCut        = "stream_cut"
	notStoredClientGone = "client_gone"
)

var notStoredReasons = []string{notStoredError, notStoredIncomplete, notStoredCut, notStoredClientGone}

// notStoredReason names an Assembler's refusal; "" when there is none, or
// when it is a policy (several choices) rather than a fault.
func notStoredReason(err error) string {
	switch {
	case errors.Is(err, adapters.ErrStreamError):
		return notStoredError
	case errors.Is(err, adapters.ErrStreamIncomplete):
		return notStoredIncomplete
	}
	return ""
}

// notStored counts a streamed answer that was headed for the cache and is
// not stored, and logs it. The cache is doing its job, so the line is
// DEBUG when the fault is loud already (a cut stream has its "upstream
// stream broke" WARN, a client gone is a client_aborts_total); a node that
// put an error in its stream or ended it without [DONE] is an upstream
// fault nothing else reports, so that is a WARN naming the node, at most
// one per node and reason every 10 s.
func (g *Gateway) notStored(id, node, why string) {
	g.cm.notStored[why].Inc()
	switch why {
	case notStoredError, notStoredIncomplete:
		g.upLog.warn(why+":"+node, "upstream stream not clean; its answer is not cached", "reason", why, "node", node, "request_id", id)
	default:
		if g.log.Enabled(context.Background(), slog.LevelDebug) {
			g.log.Debug("cache: streamed answer not stored", "reason", why, "node", node, "request_id", id)
		}
	}
}

// errClientGone stops a pump's read of the node once its client is gone.
var errClientGone = errors.New("client gone")

// pumped is what a stream's pump saw.
type pumped struct {
	broken     bool
	cut        string // why the read of the node stopped before its end: notStoredCut or notStoredClientGone
	events     int
	usage      adapters.Usage // from the include_usage chunk
	usageKnown bool
}

// settle charges a non-streaming answer's real usage and counts its tokens.
func (g *Gateway) settle(x *exchange, u adapters.Usage, known bool) {
	if !known {
		if x.charge != nil {
			x.charge.Settle(-1) // usage unknown: the estimate stands
		}
		return
	}
	if x.charge != nil {
		x.charge.Settle(u.TotalTokens)
	}
	g.metrics.countTokens(x.tenant.name, "upstream", u.PromptTokens, u.CompletionTokens)
	x.trc.usage(u)
}

// pump copies upstream events to the client as they arrive and publishes
// them to the flight. It flushes before each read of the upstream's socket:
// what one read brought leaves in one chunk and one write, and no event
// waits for the next. When the client goes away the upstream is closed at
// once, unless followers of the flight still read it. It reports whether
// the stream broke.
func (g *Gateway) pump(w flushWriter, id string, resp *adapters.UpstreamResponse, f *flight, asm *adapters.Assembler, wantUsage bool) (r pumped) {
	clientOK := true
	alone := func() bool { return f == nil || f.followers.Load() == 0 }
	resp.OnRead(func() error {
		if clientOK && w.Flush() != nil {
			clientOK = false
			g.metrics.clientAborts.Inc()
		}
		if !clientOK && alone() {
			return errClientGone // no reader left: stop reading the node
		}
		return nil
	})
	for ; ; r.events++ {
		if !clientOK && alone() {
			r.broken, r.cut = true, notStoredClientGone
			return r
		}
		ev, err := resp.Next()
		if err != nil {
			if errors.Is(err, io.EOF) {
				return r
			}
			if !clientOK && alone() {
				r.broken, r.cut = true, notStoredClientGone
				return r
			}
			g.log.Warn("upstream stream broke", "request_id", id, "error", err.Error())
			g.metrics.streamErrors.Inc()
			e := adapters.UpstreamError("upstream stream ended early: " + err.Error())
			errEvent := adapters.AppendSSEData(nil, e.AppendJSON(nil))
			if f != nil {
				f.publish(errEvent, false)
			}
			if clientOK {
				_, _ = w.Write(errEvent)
				_ = w.Flush()
			}
			r.broken, r.cut = true, notStoredCut
			return r
		}
		usageOnly := false
		if asm != nil {
			usageOnly = asm.Add(&ev)
		} else if usageOnly = adapters.IsUsageOnly(ev.Data); usageOnly {
			r.usage, r.usageKnown = adapters.ParseUsage(ev.Data)
		}
		if f != nil {
			f.publish(ev.Raw, usageOnly)
		}
		if clientOK && (!usageOnly || wantUsage) {
			if _, err := w.Write(ev.Raw); err != nil {
				clientOK = false
				g.metrics.clientAborts.Inc()
			}
		}
	}
}

// follow serves a request from a flight led by an identical one. It
// returns false when the leader got no usable answer, so the caller goes
// upstream itself.
func (g *Gateway) follow(ctx *fasthttp.RequestCtx, x *exchange, f *flight) bool {
	select {
	case <-f.ready:
	case <-time.After(g.conf().Timeouts.Total.D()):
		return false
	}
	if f.failed {
		return false
	}
	if a := f.finished(); a != nil {
		g.serveFlightAnswer(ctx, x, f, a)
		return true
	}
	var answer *adapters.Answer
	if !f.streaming || !x.req.Stream {
		answer, _ = f.result()
		if answer == nil && x.req.Stream {
			return false // the leader's JSON answer can't be replayed as a stream
		}
	}
	x.cacheResult, x.cacheReason = cacheMiss, "coalesced"
	x.upstream = f.upstream
	ctx.Response.Header.Set("X-Upstream", f.upstream)
	ctx.Response.Header.Set("X-Upstream-Attempts", "0")
	ctx.Response.Header.Set("X-Coalesced", "true")
	if !f.streaming {
		if answer == nil {
			ctx.SetStatusCode(f.status)
			ctx.Response.Header.SetContentTypeBytes(f.contentType)
			ctx.SetBody(f.body)
			return true
		}
		g.replay(ctx, x, answer)
		return true
	}
	if !x.req.Stream {
		if answer == nil {
			g.writeError(ctx, adapters.UpstreamError("the shared upstream stream for this request failed"))
			return true
		}
		g.replay(ctx, x, answer)
		return true
	}
	ctx.SetStatusCode(f.status)
	ctx.SetContentType("text/event-stream")
	ctx.Response.Header.Set(fasthttp.HeaderCacheControl, "no-cache")
	wantUsage := x.req.IncludeUsage
	f.followers.Add(1)
	done := x.handOff()
	setStreamBody(ctx, func(w flushWriter) {
		defer done(-1)
		defer f.followers.Add(-1)
		for i := 0; ; i++ {
			ev, ok := f.next(i)
			if !ok {
				_ = w.Flush()
				return
			}
			if ev.usageOnly && !wantUsage {
				continue
			}
			if _, err := w.Write(ev.raw); err != nil {
				return
			}
			if f.caughtUp(i+1) && w.Flush() != nil {
				return
			}
		}
	})
	return true
}

// finish records metrics and the access log line. Prompts never appear.
func (g *Gateway) finish(ctx *fasthttp.RequestCtx, x *exchange, panicked any) {
	if x.finished {
		return
	}
	x.finished = true
	if x.req != nil {
		defer x.req.Release()
	}
	if r := panicked; r != nil {
		// A bug, not bad input: log it, answer 500, and release below.
		g.log.Error("handler panicked", "request_id", x.id, "panic", fmt.Sprint(r), "stack", string(debug.Stack()))
		x.streamOwned = false
		ctx.ResetBody()
		g.writeError(ctx, &adapters.APIError{Status: 500, Type: adapters.TypeServer, Code: "internal_error", Message: "internal error; request id " + x.id})
	}
	if !x.streamOwned {
		x.slot.release()
		if x.charge != nil {
			x.charge.Settle(0) // no-op when already settled; else nothing was generated
		}
		x.pass.Release()
	}
	x.status = ctx.Response.StatusCode()
	g.metrics.observe(x)
	x.finishSpan()
	if x.cacheResult != "" {
		ctx.Response.Header.SetCanonical(headerCache, []byte(x.cacheResult))
		g.cm.request(x.cacheResult, x.cacheReason)
	}
	if g.conf().Logging.AccessLog {
		model := x.model
		if model == "" && x.req != nil {
			model = x.req.Model
		}
		now := time.Now()
		logAccess(g.log, now, &accessLine{requestID: x.id, path: string(ctx.Path()), status: x.status,
			model: model, stream: x.req != nil && x.req.Stream, upstream: x.upstream, attempts: x.attempts,
			cache: x.cacheResult, duration: now.Sub(x.start)})
	}
}

// modelsBody lists the models the node entries serve (discovered or not)
// and the aliases.
func modelsBody(cfg *Config) []byte {
	seen := map[string]bool{}
	var served, aliases []string
	for _, n := range cfg.Nodes {
		for _, m := range n.Models {
			if !seen[m] {
				seen[m] = true
				served = append(served, m)
			}
		}
	}
	for _, a := range cfg.Models {
		aliases = append(aliases, a.Name)
	}
	sort.Strings(served)
	sort.Strings(aliases)
	list := adapters.ModelList{Object: "list", Data: []adapters.Model{}}
	now := time.Now().Unix()
	for _, m := range served {
		list.Data = append(list.Data, adapters.Model{ID: m, Object: "model", Created: now, OwnedBy: "frontdoor"})
	}
	for _, a := range aliases {
		list.Data = append(list.Data, adapters.Model{ID: a, Object: "model", Created: now, OwnedBy: "frontdoor-alias"})
	}
	b, _ := json.Marshal(list)
	return b
}

// Response header names, canonical, for SetCanonical on the hot path.
var (
	headerUpstream         = []byte("X-Upstream")
	headerUpstreamAttempts = []byte("X-Upstream-Attempts")
	headerCache            = []byte("X-Cache")
	headerRequestID        = []byte("X-Request-Id")
)

// heldSlot is the node or spill-over slot an exchange holds; release frees
// it once, whichever path (answer, error, stream end, panic) gets there
// first.
type heldSlot struct {
	node     *balancer.Node
	inflight *atomic.Int64
	held     atomic.Bool
}

func (s *heldSlot) hold(n *balancer.Node, inflight *atomic.Int64) {
	s.node, s.inflight = n, inflight
	s.held.Store(true)
}

func (s *heldSlot) release() {
	if !s.held.CompareAndSwap(true, false) {
		return
	}
	if s.node != nil {
		s.node.Release()
	}
	if s.inflight != nil {
		s.inflight.Add(-1)
	}
}
