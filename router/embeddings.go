package router

import (
	"fmt"
	"strconv"
	"time"

	"github.com/valyala/fasthttp"

	"frontdoor/adapters"
	"frontdoor/admission"
	"frontdoor/balancer"
	"frontdoor/cache"
	"frontdoor/internal/reply"
	"frontdoor/router/reuse"
)

// An embeddings request goes the chat request's way (tenant, model
// allow-list, admission, node choice, retries, metrics, access log) with a
// cache of its own: each input is an exact entry holding its vector, so a
// batch whose inputs are partly cached sends only the others upstream and
// the answer is put together in input order. There is no semantic lookup,
// no coalescing of identical requests and no spill-over.

// embeddingBatch is one embeddings request on its way through the cache.
type embeddingBatch struct {
	req  *adapters.EmbeddingsRequest
	plan *reuse.Plan
	*reuse.Inputs
}

// badEmbeddingsReason labels frontdoor_upstream_bad_answers_total for an
// embeddings answer refused by what it holds (see tryEmbeddingNodes).
const badEmbeddingsReason = "invalid_embeddings"

func (g *Gateway) serveEmbeddings(ctx *fasthttp.RequestCtx, id string) {
	x := g.newExchange(ctx, adapters.EndpointEmbeddings, id)
	defer func() { g.finish(ctx, x, recover()) }()
	if !g.enter(ctx, x, true) {
		return
	}
	er, apiErr := adapters.ParseEmbeddingsRequestWith(ctx.PostBody(), g.bodies.parseOptions(&g.conf().Limits))
	if apiErr != nil {
		g.bodies.note(x, apiErr)
		reply.Error(ctx, apiErr)
		return
	}
	defer er.Release()
	x.obs.ParsedModel(x.endpoint, er.Model, x.tenant.name)
	if !g.resolveModel(ctx, x, er.Model) {
		return
	}
	plan := g.cache.PlanEmbeddings(cacheRequest(g.rt.Load(), x, nil), reuse.HintsOf(&ctx.Request.Header, false))
	b := &embeddingBatch{req: er, plan: plan, Inputs: g.cache.LookupInputs(x.obs, plan, er)}
	x.setCache(&ctx.Response.Header, b.Outcome, "")
	if len(b.Send) == 0 {
		g.serveEmbeddingHits(ctx, x, b)
		return
	}
	if plan.LookupOnly() { // never upstream
		ctx.SetStatusCode(fasthttp.StatusNoContent)
		x.setCache(&ctx.Response.Header, reuse.Outcome{Result: reuse.ResultMiss, Reason: reuse.ReasonLookupOnly}, "")
		return
	}
	if !g.admitEmbeddings(ctx, x, b) {
		return
	}
	var idx []int
	if !b.Whole {
		idx = b.Send
	}
	ur := adapters.UpstreamRequest{Endpoint: x.endpoint, Body: er.UpstreamBody(x.model, idx), RequestID: x.id, Model: x.model}
	st := g.up.waitCandidates(x)
	a, ans, ok := g.up.tryEmbeddingNodes(x, &ur, st, b)
	if !ok {
		reply.Error(ctx, g.up.noNodeError(x, st))
		return
	}
	g.metrics.upstreamAnswers.Add(1)
	g.commitEmbeddings(ctx, x, b, a, ans)
}

func entryEmbedding(e *cache.Entry) adapters.Embedding {
	return adapters.Embedding{Vector: adapters.DecodeFloat32s(e.Embedding), Wide: e.EmbeddingWide}
}

// serveEmbeddingHits answers a request whose every input was cached.
func (g *Gateway) serveEmbeddingHits(ctx *fasthttp.RequestCtx, x *exchange, b *embeddingBatch) {
	vecs := make([]adapters.Embedding, len(b.Hits))
	for i, e := range b.Hits {
		vecs[i] = entryEmbedding(e)
	}
	saved := g.savedByCache(ctx, x, b)
	ctx.SetContentType("application/json")
	ctx.Response.SetBodyRaw(adapters.AppendEmbeddingsJSON(nil, b.Hits[0].Model, vecs, b.req.Base64,
		adapters.Usage{PromptTokens: saved, TotalTokens: saved, CachedTokens: saved}))
}

// savedByCache counts the tokens the cached inputs did not cost, says so
// in the X-Frontdoor-Cached header and returns them: the usage of a
// cached input is what computing it cost, all of it cached
// (docs/endpoints.md#usage-on-cache-hits).
func (g *Gateway) savedByCache(ctx *fasthttp.RequestCtx, x *exchange, b *embeddingBatch) int {
	saved, hits := g.cache.Saved(b.Inputs)
	g.metrics.countTokens(x.tenant.name, "cache", saved, 0)
	if hits > 0 { // not a batch that only repeats an input
		ctx.Response.Header.Set(headerCached, strconv.Itoa(saved))
	}
	return saved
}

// admitEmbeddings checks each input sent against the model's context
// window and charges their tokens against the token budgets, as admitMiss
// does a prompt's. It writes the error and returns false when the request
// may not go on.
func (g *Gateway) admitEmbeddings(ctx *fasthttp.RequestCtx, x *exchange, b *embeddingBatch) bool {
	maxLen := g.rt.Load().maxModelLen[x.model]
	tokens := 0
	if maxLen > 0 || g.adm.CountsTokens(x.tenant.name) {
		for _, i := range b.Send {
			n := b.req.InputTokens(i)
			if n < 0 {
				n = admission.CountTokens(b.req.InputText(i))
			}
			if maxLen > 0 && n > maxLen {
				reply.Error(ctx, adapters.BadRequest("input", fmt.Sprintf(
					"This model's maximum context length is %d tokens. However, input[%d] has %d tokens. Please reduce the length of the input.", maxLen, i, n)))
				return false
			}
			tokens += n
		}
	}
	return g.chargeTokens(ctx, x, tokens)
}

// tryEmbeddingNodes is tryNodes for an embeddings batch, which checks a
// node's 2xx answer before taking it (the whole batch's too, passed on as
// the node wrote it): exactly one vector for each input sent (indexes 0 to
// n-1), all of one non-zero length, every number a finite float32, the body
// valid JSON. An answer that is not fails its attempt as a malformed one
// does (the node is reported, the next one tried; a 502 when none is
// left). One whose vectors are not as long as the batch's cached ones ends
// the attempts with a 502: the node works, and another would most likely
// answer as it did. Neither is cached, and each is counted and logged
// (badEmbeddings). ans is nil for an error status, the client's as mapped.
func (u *upstream) tryEmbeddingNodes(x *exchange, ur *adapters.UpstreamRequest, st *attempts, b *embeddingBatch) (attempt, *adapters.EmbeddingsAnswer, bool) {
	var a attempt
	for {
		n := u.nextNode(x, st)
		if n == nil {
			return a, nil, false
		}
		if x.attempts > 0 {
			u.metrics.retries[st.lastReason].Inc()
			time.Sleep(u.backoff(x.attempts))
		}
		a = u.send(x, ur, n)
		if a.err != nil || adapters.RetryableStatus(a.resp.Status) {
			u.attemptFailed(x, st, a)
			if st.final {
				return a, nil, false
			}
			continue
		}
		if a.resp.Status >= 400 {
			u.answeredBy(x, a)
			return a, nil, true
		}
		ans, err := adapters.ParseEmbeddingsAnswer(a.resp.Body, len(b.Send))
		if err == nil {
			if err = b.sameDimensions(ans); err == nil {
				u.answeredBy(x, a)
				return a, ans, true
			}
			st.final = true // the node works: this answer is its and the cache's disagreement
		}
		x.slot.release()
		a.resp.Close()
		outcome := balancer.OutcomeFailure
		if st.final {
			outcome = balancer.OutcomeSuccess
		}
		u.pool.Report(n, outcome, 0)
		st.lastErr = adapters.UpstreamError("upstream " + n.Name() + " failed: " + err.Error())
		st.lastReason = "malformed"
		u.badEmbeddings(x.id, n.Name(), err)
		if st.final {
			return a, nil, false
		}
	}
}

// sameDimensions reports an error unless ans's vectors are as long as the
// cached ones of the batch.
func (b *embeddingBatch) sameDimensions(ans *adapters.EmbeddingsAnswer) error {
	for _, e := range b.Hits {
		if e != nil && len(e.Embedding) != 4*ans.Dimensions() {
			return fmt.Errorf("vectors of %d dimensions, the cache holds %d for this model (Cache-Control: no-cache sends the whole batch)",
				ans.Dimensions(), len(e.Embedding)/4)
		}
	}
	return nil
}

// badEmbeddings makes an embeddings answer the gateway refused for what it
// holds loud, as badAnswer does a malformed one: a metric and a WARN line
// naming the node, at most one per node every 10 s (never the body).
func (u *upstream) badEmbeddings(id, node string, err error) {
	u.metrics.badAnswers[badEmbeddingsReason].Inc()
	u.upLog.Warn(badEmbeddingsReason+":"+node, "upstream answer refused", "reason", badEmbeddingsReason, "node", node, "request_id", id, "error", err.Error())
}

// commitEmbeddings answers from the node's answer a (ans, read and
// checked, unless a is an error status), with the cached vectors in their
// places, and stores what the node computed.
func (g *Gateway) commitEmbeddings(ctx *fasthttp.RequestCtx, x *exchange, b *embeddingBatch, a attempt, ans *adapters.EmbeddingsAnswer) {
	resp := a.resp
	defer func() {
		resp.Close()
		x.slot.release()
	}()
	setUpstream(&ctx.Response.Header, x.upstream, x.attempts)
	if ans == nil {
		reply.Error(ctx, a.backend.MapError(resp.Status, resp.Body))
		return
	}
	g.metrics.settle(x, ans.Usage, ans.Usage.TotalTokens > 0 || ans.Usage.PromptTokens > 0)
	model := ans.Model
	if model == "" {
		model = x.model
	}
	if b.Whole { // the node's answer, as it is: checked, so valid JSON
		passOn(ctx, resp)
	} else {
		saved := g.savedByCache(ctx, x, b)
		vecs := make([]adapters.Embedding, len(b.req.Inputs))
		at := make(map[string]int, len(b.Send))
		for j, i := range b.Send {
			at[b.Keys[i]] = j
		}
		for i := range vecs {
			if e := b.Hits[i]; e != nil {
				vecs[i] = entryEmbedding(e)
			} else {
				vecs[i] = ans.Vectors[at[b.Keys[i]]]
			}
		}
		ctx.SetContentType("application/json")
		// The whole batch's usage: the node's for the inputs it computed
		// (what the charge was settled with, above), the cached inputs'
		// as theirs cost, and those cached.
		u := ans.Usage
		u.PromptTokens += saved
		u.TotalTokens += saved
		u.CachedTokens += saved
		ctx.Response.SetBodyRaw(adapters.AppendEmbeddingsJSON(nil, model, vecs, b.req.Base64, u))
	}
	g.cache.StoreInputs(b.plan, b.Inputs, b.req, model, ans)
}

// passOn sends the node's answer to the client as it is.
func passOn(ctx *fasthttp.RequestCtx, resp *adapters.UpstreamResponse) {
	ctx.SetStatusCode(resp.Status)
	ctx.Response.Header.SetContentTypeBytes(resp.ContentType)
	ctx.SetBody(resp.Body)
}
