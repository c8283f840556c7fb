package router

import (
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"frontdoor/adapters"
	"frontdoor/balancer"
	"frontdoor/internal/reply"
	"frontdoor/internal/telemetry"

	"github.com/valyala/fasthttp"
)

type attempts struct {
	cands      []*balancer.Node // ordered by the picker
	next       int              // index of the next candidate to try
	lastErr    *adapters.APIError
	lastReason string // why the last attempt failed, for the retry metric
	final      bool   // lastErr is the answer: no other node, no spill-over
	// accept, when set, refuses an answer that is not a retryable status
	// (an error says why): the attempt fails as a failed send does, and the
	// next node is tried. nil: every such answer is taken.
	accept func(*adapters.UpstreamResponse) error
}

// upstream is how a request reaches a node or the hosted API: node
// choice, attempts, retries on another node, spill-over (spill.go), the
// judge's calls (judge.go) and the nodes' backends. It holds no gateway:
// what it needs of one is in its fields.
type upstream struct {
	rt       *atomic.Pointer[liveConfig] // the gateway's: the config and the spill-over in force
	pool     *balancer.Pool
	fixed    map[string]adapters.Backend // Deps.Backends, by node name
	backends sync.Map                    // *balancer.Node -> adapters.Backend, built on first use
	metrics  *gatewayMetrics
	log      *slog.Logger
	upLog    *telemetry.RateLog // rate-limited lines about nodes' answers
	hooks    requestHooks       // pick narrows the candidates
}

func (u *upstream) conf() *Config { return &u.rt.Load().cfg }

// reached is how a request's trip upstream ended: an answer to commit
// (resp, from node, or from the spill-over when node is nil) or, when
// there is none, err, the client's answer.
type reached struct {
	node *balancer.Node
	be   adapters.Backend
	resp *adapters.UpstreamResponse
	err  *adapters.APIError
}

// forward sends x's request upstream and commits the answer, or answers
// the error.
func (g *Gateway) forward(ctx *fasthttp.RequestCtx, x *exchange, ur *adapters.UpstreamRequest) {
	r := g.up.reach(&ctx.Response.Header, x, ur)
	if r.err != nil {
		x.failFlight()
		reply.Error(ctx, r.err)
		return
	}
	g.commit(ctx, x, r.node, r.be, r.resp)
}

// reach tries the candidate nodes in order until one answers. Failures
// before the first byte move on to the next (different) node. h takes the
// headers that name a spill-over.
func (u *upstream) reach(h *fasthttp.ResponseHeader, x *exchange, ur *adapters.UpstreamRequest) reached {
	st := u.waitCandidates(x)
	if r, ok := u.predictedSpill(h, x, ur, st); ok {
		return r
	}
	return u.forwardFrom(h, x, ur, st)
}

// maxPredictedTTFT is x's limit on the predicted time to first token: the
// tenant's max_predicted_ttft, else spillover.max_predicted_ttft_models'
// for x.model, else spillover.max_predicted_ttft; 0 = off.
func (u *upstream) maxPredictedTTFT(x *exchange) time.Duration {
	if x.tenant != nil && x.tenant.cfg.MaxPredictedTTFT > 0 {
		return x.tenant.cfg.MaxPredictedTTFT.D()
	}
	sc := &u.conf().Spillover
	if d := sc.MaxPredictedTTFTModels[x.model]; d > 0 {
		return d.D()
	}
	return sc.MaxPredictedTTFT.D()
}

// predictedSpill spills x at once ("predicted_slo") when the TTFT
// predictor says every local candidate with a free slot would take longer
// than x's limit to the first token, and reports whether it answered the
// client. An unknown prediction on any of them, no free candidate (the
// saturated path decides), spill-over off or refused (the tenant's
// spillover: false, the endpoint, the mirrored quota, a hosted failure):
// the request stays local, as without a limit. When some free candidates
// are known to be over the limit and others are not, the others are tried
// first (in the picker's order), so the limit steers the request to a node
// expected to meet it before it spills anything. A Responses request that
// continues a previous response (previous_response_id) is left alone: its
// state may live on a local node, and a slow answer beats a lost
// conversation.
func (u *upstream) predictedSpill(h *fasthttp.ResponseHeader, x *exchange, ur *adapters.UpstreamRequest, st *attempts) (reached, bool) {
	if x.req == nil || u.rt.Load().spill == nil || (x.endpoint == adapters.EndpointResponses && x.req.PreviousResponseID != "") {
		return reached{}, false
	}
	limit := u.maxPredictedTTFT(x).Seconds()
	if limit <= 0 {
		return reached{}, false
	}
	var buf [16]bool
	over := buf[:0]
	if len(st.cands) > len(buf) {
		over = make([]bool, 0, len(st.cands))
	}
	free, nOver := 0, 0
	for _, n := range st.cands {
		slow := false
		if n.Inflight() < int64(n.Config().MaxConcurrency) {
			free++
			p := u.pool.PredictTTFT(n, x.hints)
			slow = p.Known && p.Seconds > limit
		}
		if slow {
			nOver++
		}
		over = append(over, slow)
	}
	if free == 0 {
		return reached{}, false
	}
	if nOver < free {
		if nOver > 0 {
			preferWithin(st.cands, over)
		}
		return reached{}, false
	}
	if r, ok := u.trySpill(h, x, ur, reasonPredicted); ok {
		return r, true
	}
	// Not spilled: the request goes local, and a later refusal of the
	// saturated or failed kind says so itself.
	x.spillRefused, x.spillSkipped = false, false
	return reached{}, false
}

// waitCandidates is candidates, after waiting up to balancer.queue.max_wait
// for a slot when every node is full.
func (u *upstream) waitCandidates(x *exchange) *attempts {
	st := u.candidates(x)
	if maxWait := u.conf().Balancer.Queue.MaxWait.D(); maxWait > 0 && !anyFree(st.cands) && u.pool.AnyUsable(x.model) {
		// Every node is full: wait for a slot before spilling over or
		// answering 503.
		deadline := time.Now().Add(maxWait)
		for !anyFree(st.cands) && time.Now().Before(deadline) {
			if !u.pool.WaitForSlot(x.upstreamCtx(), x.model, time.Until(deadline)) {
				break
			}
			st = u.candidates(x)
		}
	}
	return st
}

// candidates are the nodes serving x.model, best first. Chat and
// completions hint the prompt's prefix and system prompt; other requests
// (x.req nil) are ranked on load alone.
func (u *upstream) candidates(x *exchange) *attempts {
	var h balancer.Hints
	if x.req != nil {
		if !x.prefixDone {
			x.prefix, x.prefixDone = requestPrefix(u.pool.PrefixHasher(), x.req), true
		}
		h = balancer.Hints{Affinity: x.req.SystemPromptHash(), Prefix: x.prefix}
		if x.prefix == nil {
			h.PromptTokens = promptTokens(x.req)
		}
	}
	x.hints = h
	cands, _ := u.pool.PickWith(x.model, h)
	cands = u.hooks.pick(x, cands)
	x.tries = attempts{cands: cands, lastReason: "other"}
	return &x.tries
}

// forwardFrom is forward from where st stands.
func (u *upstream) forwardFrom(h *fasthttp.ResponseHeader, x *exchange, ur *adapters.UpstreamRequest, st *attempts) reached {
	if a, ok := u.tryNodes(x, ur, st); ok {
		u.metrics.upstreamAnswers.Add(1)
		return reached{node: a.node, be: a.backend, resp: a.resp}
	}
	if st.final {
		return reached{err: st.lastErr}
	}
	return u.noAnswer(h, x, ur, st)
}

// tryNodes sends ur to the candidates in order until one answers, moving
// on to the next (different) node after a failure before the first byte.
// An answer st.accept refuses fails its attempt too. It returns the answer
// (ok), or no answer when the candidates or the attempts ran out or
// st.final says to stop; st.lastErr then says why. The caller counts a
// client's answer (metrics.upstreamAnswers).
func (u *upstream) tryNodes(x *exchange, ur *adapters.UpstreamRequest, st *attempts) (a attempt, ok bool) {
	for {
		n := u.nextNode(x, st)
		if n == nil {
			return a, false
		}
		if x.attempts > 0 {
			u.metrics.retries[st.lastReason].Inc()
			time.Sleep(u.backoff(x.attempts))
		}
		a = u.send(x, ur, n)
		if a.err == nil && !adapters.RetryableStatus(a.resp.Status) {
			if a.err = st.refused(a.resp); a.err == nil {
				u.answeredBy(x, a)
				return a, true
			}
			a.resp.Close() // refused: the attempt failed with a.err
		}
		u.attemptFailed(x, st, a)
		if st.final {
			return a, false
		}
	}
}

// refused is why st.accept refuses resp; nil when it takes it.
func (st *attempts) refused(resp *adapters.UpstreamResponse) error {
	if st.accept == nil {
		return nil
	}
	return st.accept(resp)
}

// nextNode takes a slot on the next candidate that has one free, or
// returns nil when none is left or the attempts are used up. The slot is
// released on every path (finish releases it too, panics included).
func (u *upstream) nextNode(x *exchange, st *attempts) *balancer.Node {
	for st.next < len(st.cands) && x.attempts < 1+u.conf().Balancer.Retries {
		n := st.cands[st.next]
		st.next++
		var pred balancer.Prediction
		if x.req != nil { // before the slot and Routed, which change what it reads
			pred = u.pool.PredictTTFT(n, x.hints)
		}
		if n.TryAcquire() {
			x.pred = pred
			x.slot.hold(n, nil)
			u.pool.Routed(n, x.prefix)
			return n
		}
	}
	return nil
}

// attempt is one try of a request on a node, up to the node's first byte.
type attempt struct {
	node    *balancer.Node
	backend adapters.Backend
	sent    time.Time // for a stream, when it was sent: the time to first token runs from it
	resp    *adapters.UpstreamResponse
	err     error
}

// send sends ur to node n, whose slot x holds, traced when x is.
func (u *upstream) send(x *exchange, ur *adapters.UpstreamRequest, n *balancer.Node) attempt {
	x.attempts++
	a := attempt{node: n, backend: u.backendFor(n)}
	if ur.Stream { // the time to the first token is only known for streams
		a.sent = time.Now()
	}
	span := x.obs.Attempt(ur, n.Name(), x.attempts)
	a.resp, a.err = a.backend.Send(x.upstreamCtx(), ur)
	span.AttemptEnded(a.resp, a.err, a.sent)
	return a
}

// answeredBy records that a's node answered: the answer goes to the client
// (or the judge).
func (u *upstream) answeredBy(x *exchange, a attempt) {
	// Time to first token is only known for streams: a non-streaming
	// answer arrives whole.
	var ttft time.Duration
	if a.resp.Streaming() {
		ttft = time.Since(a.sent)
		u.metrics.ttft.add(a.sent.Add(ttft), ttft)
		u.pool.ObserveTTFT(a.node, x.pred, ttft)
	}
	u.pool.Report(a.node, balancer.OutcomeSuccess, ttft)
	x.upstream = a.node.Name()
}

// attemptFailed ends an attempt that failed before its first byte: it frees
// the slot, reports the node, logs, and records in st why (st.final when
// no other node should be tried).
func (u *upstream) attemptFailed(x *exchange, st *attempts, a attempt) {
	n := a.node
	x.slot.release()
	if a.err == nil { // a status another node may not answer with
		st.lastErr, st.lastReason = a.backend.MapError(a.resp.Status, a.resp.Body), retryReason(nil, a.resp.Status)
		a.resp.Close()
		u.pool.Report(n, balancer.OutcomeFailure, 0)
		u.log.Warn("upstream attempt refused", "request_id", x.id, "node", n.Name(), "status", a.resp.Status)
		return
	}
	st.lastErr, st.lastReason = sendError(n.Name(), a.err), retryReason(a.err, 0)
	if errors.Is(a.err, adapters.ErrAnswerTooLarge) {
		// The node works; another would most likely answer as much.
		u.pool.Report(n, balancer.OutcomeSuccess, 0)
		st.final = true
		u.badAnswer(x.id, n.Name(), a.err)
		return
	}
	u.pool.Report(n, balancer.OutcomeFailure, 0)
	if !u.badAnswer(x.id, n.Name(), a.err) {
		u.log.Warn("upstream attempt failed", "request_id", x.id, "node", n.Name(), "error", a.err.Error())
	}
}

// noAnswer spills the request over, or answers the error of the last
// attempt, when no node answered.
func (u *upstream) noAnswer(h *fasthttp.ResponseHeader, x *exchange, ur *adapters.UpstreamRequest, st *attempts) reached {
	reason := "failed"
	if x.attempts == 0 {
		reason = "saturated"
	}
	if r, ok := u.trySpill(h, x, ur, reason); ok {
		return r
	}
	return reached{err: u.noNodeError(x, st)}
}

// noNodeError is the answer to a request no node answered: the last
// attempt's error, or why there was none.
func (u *upstream) noNodeError(x *exchange, st *attempts) *adapters.APIError {
	lastErr := st.lastErr
	if lastErr == nil && x.attempts == 0 {
		if msg, ok := u.pool.ModelMismatch(x.model); ok {
			// Every node configured for the model lists other names: its
			// 404 would hide a configuration mistake.
			return &adapters.APIError{Status: 503, Type: adapters.TypeUnavailable, Code: "model_not_served", Message: msg}
		}
	}
	switch {
	case x.spillRefused:
		lastErr = adapters.Unavailable("no local capacity for "+x.model+", and this tenant's traffic may not leave for the hosted API; retry shortly", 1)
	case x.spillSkipped:
		lastErr = adapters.Unavailable("no local capacity for "+x.model+", and /v1/responses is not spilled to the hosted API (spillover.responses: false); retry shortly", 1)
	case lastErr == nil && !u.pool.AnyUsable(x.model):
		lastErr = adapters.Unavailable("no healthy node serves "+x.model+" right now; retry shortly", 1)
	case lastErr == nil:
		lastErr = adapters.Unavailable("all nodes serving "+x.model+" are at capacity; retry shortly", 1)
	}
	return lastErr
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

// failFlight tells the followers of x's flight that it got no answer.
func (x *exchange) failFlight() {
	if f := x.flight; f != nil {
		f.Fail()
		x.flight = nil
	}
}

// backoff is the wait before the attempt-th retry: exponential from
// balancer.backoff.base up to max, with equal jitter.
func (u *upstream) backoff(attempt int) time.Duration {
	base, maxD := u.conf().Balancer.Backoff.Base.D(), u.conf().Balancer.Backoff.Max.D()
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
func (u *upstream) badAnswer(id, node string, err error) bool {
	kind := ""
	switch {
	case errors.Is(err, adapters.ErrAnswerTooLarge):
		kind = "too_large"
	case errors.Is(err, adapters.ErrMalformedAnswer):
		kind = "malformed"
	default:
		return false
	}
	u.metrics.badAnswers[kind].Inc()
	u.upLog.Warn(kind+":"+node, "upstream answer refused", "reason", kind, "node", node, "request_id", id, "error", err.Error())
	return true
}

// preferWithin moves the candidates flagged in over behind the others,
// keeping each group's order.
func preferWithin(cands []*balancer.Node, over []bool) {
	for i := 1; i < len(cands); i++ {
		for j := i; j > 0 && !over[j] && over[j-1]; j-- {
			cands[j], cands[j-1] = cands[j-1], cands[j]
			over[j], over[j-1] = over[j-1], over[j]
		}
	}
}

// promptTokens estimates the prompt's tokens at 4 bytes each, for the
// TTFT predictor when the prefix hasher is off.
func promptTokens(req *adapters.Request) int {
	var bytes int
	req.WalkPrompt(func([]byte) {}, func(b []byte) { bytes += len(b) })
	return bytes / 4
}

// requestPrefix is the prompt's prefix hashes for the prefix scorer; nil
// when h is (prefix weight 0).
func requestPrefix(h *balancer.PrefixHasher, req *adapters.Request) *balancer.Prefix {
	if h == nil {
		return nil
	}
	req.WalkPrompt(h.Message, h.Write)
	return h.Prefix()
}

// backendFor returns the backend of a node in service, building it on
// first use (a node discovered or added by a reload).
func (u *upstream) backendFor(n *balancer.Node) adapters.Backend {
	if b, ok := u.backends.Load(n); ok {
		return b.(adapters.Backend)
	}
	b, err := u.buildBackend(n)
	if err != nil {
		return brokenBackend{name: n.Name(), err: err}
	}
	return b
}

func (u *upstream) buildBackend(n *balancer.Node) (adapters.Backend, error) {
	b := u.fixed[n.Name()]
	if b == nil {
		var err error
		if b, err = nodeBackend(n.Config(), *u.conf()); err != nil {
			return nil, err
		}
	}
	actual, _ := u.backends.LoadOrStore(n, b)
	return actual.(adapters.Backend), nil
}

// brokenBackend stands for a node whose backend could not be built: every
// attempt on it fails like a refused connection.
type brokenBackend struct {
	name string
	err  error
}

var _ adapters.Backend = brokenBackend{}

func (b brokenBackend) Send(context.Context, *adapters.UpstreamRequest) (*adapters.UpstreamResponse, error) {
	return nil, b.err
}
func (b brokenBackend) MapError(status int, _ []byte) *adapters.APIError {
	return adapters.UpstreamError("upstream status " + strconv.Itoa(status))
}
func (b brokenBackend) Name() string { return b.name }
