package router

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/valyala/fasthttp"

	"frontdoor/adapters"
	"frontdoor/admission"
	"frontdoor/balancer"
	"frontdoor/cache"
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
	plan *cachePlan
	keys []string       // each input's exact key; nil when the cache is not used
	hits []*cache.Entry // by input: the cached vector, or nil
	send []int          // the inputs the node computes: the first of each key missing
	// whole: send is every input in order, and the client's body goes
	// upstream as it came (but for an alias's model name); the node's
	// answer is then passed on as it is.
	whole bool
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
	er, apiErr := adapters.ParseEmbeddingsRequestWith(ctx.PostBody(), g.parseOptions())
	if apiErr != nil {
		g.bodies.note(x, apiErr)
		g.writeError(ctx, apiErr)
		return
	}
	defer er.Release()
	x.obs.ParsedModel(x.endpoint, er.Model, x.tenant.name)
	if !g.resolveModel(ctx, x, er.Model) {
		return
	}
	b := &embeddingBatch{req: er, plan: g.planEmbeddings(x, hintsOf(ctx))}
	x.setCache(&ctx.Response.Header, cacheOutcome{resultBypass, b.plan.reason}, "")
	if b.plan.store {
		b.keys = cache.EmbeddingKeys(b.plan.namespace, x.model, er.Root(), er.Inputs, b.plan.keyOpt)
	}
	g.lookupEmbeddings(ctx, x, b)
	if len(b.send) == 0 {
		g.serveEmbeddingHits(ctx, x, b)
		return
	}
	if b.plan.only != 0 { // lookup-only: never upstream
		ctx.SetStatusCode(fasthttp.StatusNoContent)
		x.setCache(&ctx.Response.Header, cacheOutcome{resultMiss, reasonLookupOnly}, "")
		return
	}
	if !g.admitEmbeddings(ctx, x, b) {
		return
	}
	var idx []int
	if !b.whole {
		idx = b.send
	}
	ur := adapters.UpstreamRequest{Endpoint: x.endpoint, Body: er.UpstreamBody(x.model, idx), RequestID: x.id, Model: x.model}
	st := g.waitCandidates(x)
	a, ans, ok := g.tryEmbeddingNodes(x, &ur, st, b)
	if !ok {
		g.writeError(ctx, g.noNodeError(x, st))
		return
	}
	g.metrics.upstreamAnswers.Add(1)
	g.commitEmbeddings(ctx, x, b, a, ans)
}

// planEmbeddings decides how the cache treats an embeddings request: its
// inputs are looked up and stored unless the cache is off, the exact cache
// is disabled, or Cache-Control says otherwise.
func (g *Gateway) planEmbeddings(x *exchange, h planHints) *cachePlan {
	c := &g.conf().Cache
	p := &cachePlan{namespace: x.tenant.namespace, model: x.model, endpoint: cache.EndpointEmbeddings,
		ttl: planTTL(c, h), only: h.only, tag: h.tag, keyOpt: c.KeyOptions()}
	switch {
	case g.store == nil:
		p.reason = reasonOff
	case h.noStore:
		p.reason = reasonNoStore
	case !c.Exact.Enabled:
		p.reason = reasonDisabled
	default:
		p.store, p.lookup = true, !h.noCache
		if h.noCache {
			p.reason = reasonNoCache
		}
	}
	return p
}

// lookupEmbeddings looks each input up (when the plan says to), sets the
// outcome, and lists the inputs the node must compute in b.send.
func (g *Gateway) lookupEmbeddings(ctx *fasthttp.RequestCtx, x *exchange, b *embeddingBatch) {
	n := len(b.req.Inputs)
	p := b.plan
	if p.lookup {
		s := x.obs.Lookup("exact")
		entries, err := g.backend.GetMany(context.Background(), b.keys)
		if err != nil {
			reason := reasonStoreError
			if errors.Is(err, cache.ErrBypassed) || errors.Is(err, cache.ErrUnavailable) {
				reason = reasonStoreDown
			}
			x.setCache(&ctx.Response.Header, cacheOutcome{resultBypass, reason}, "") // the answers are still stored
		} else {
			b.hits = make([]*cache.Entry, n)
			for i, e := range entries {
				if usableEmbedding(e, p.namespace, b.req.Dimensions) {
					b.hits[i] = e
				}
			}
		}
		s.LookedUp(err == nil && countHits(b.hits) == n)
	} else if p.store {
		x.setCache(&ctx.Response.Header, cacheOutcome{resultMiss, p.reason}, "")
	}
	first := map[string]bool{}
	for i := range n {
		switch {
		case b.hits != nil && b.hits[i] != nil:
		case b.keys == nil:
			b.send = append(b.send, i)
		case !first[b.keys[i]]:
			first[b.keys[i]] = true
			b.send = append(b.send, i)
		}
	}
	b.whole = len(b.send) == n
	if b.hits == nil {
		return
	}
	hits := countHits(b.hits)
	g.emb.hits.Add(hits)
	g.emb.misses.Add(n - hits)
	switch {
	case len(b.send) == 0:
		x.setCache(&ctx.Response.Header, cacheOutcome{result: resultHitExact}, "")
	case hits > 0:
		x.setCache(&ctx.Response.Header, cacheOutcome{result: resultPartial}, "")
	default:
		x.setCache(&ctx.Response.Header, cacheOutcome{result: resultMiss}, "")
	}
}

func countHits(hits []*cache.Entry) int {
	n := 0
	for _, e := range hits {
		if e != nil {
			n++
		}
	}
	return n
}

// usableEmbedding reports whether e is an embeddings entry of namespace
// that can answer (the key covers both: this is defence in depth).
// An entry holding NaN or an infinity (stored before they were refused)
// is a miss: no JSON can carry it.
func usableEmbedding(e *cache.Entry, namespace string, dims int) bool {
	return e != nil && e.Namespace == namespace && e.Endpoint == cache.EndpointEmbeddings &&
		len(e.Embedding) > 0 && len(e.Embedding)%4 == 0 && (dims == 0 || len(e.Embedding) == 4*dims) &&
		adapters.FiniteFloat32s(e.Embedding)
}

func entryEmbedding(e *cache.Entry) adapters.Embedding {
	return adapters.Embedding{Vector: adapters.DecodeFloat32s(e.Embedding), Wide: e.EmbeddingWide}
}

// serveEmbeddingHits answers a request whose every input was cached.
func (g *Gateway) serveEmbeddingHits(ctx *fasthttp.RequestCtx, x *exchange, b *embeddingBatch) {
	vecs := make([]adapters.Embedding, len(b.hits))
	for i, e := range b.hits {
		vecs[i] = entryEmbedding(e)
	}
	saved := g.savedByCache(ctx, x, b)
	ctx.SetContentType("application/json")
	ctx.Response.SetBodyRaw(adapters.AppendEmbeddingsJSON(nil, b.hits[0].Model, vecs, b.req.Base64,
		adapters.Usage{PromptTokens: saved, TotalTokens: saved, CachedTokens: saved}))
}

// savedByCache counts the tokens the cached inputs did not cost, says so
// in the X-Frontdoor-Cached header and returns them: the usage of a
// cached input is what computing it cost, all of it cached
// (docs/endpoints.md#usage-on-cache-hits).
func (g *Gateway) savedByCache(ctx *fasthttp.RequestCtx, x *exchange, b *embeddingBatch) int {
	saved, hits := 0, 0
	for _, e := range b.hits {
		if e != nil {
			saved, hits = saved+e.Usage.PromptTokens, hits+1
		}
	}
	g.cm.tokensSaved.Add(saved)
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
		for _, i := range b.send {
			n := b.req.InputTokens(i)
			if n < 0 {
				n = admission.CountTokens(b.req.InputText(i))
			}
			if maxLen > 0 && n > maxLen {
				g.writeError(ctx, adapters.BadRequest("input", fmt.Sprintf(
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
func (g *Gateway) tryEmbeddingNodes(x *exchange, ur *adapters.UpstreamRequest, st *attempts, b *embeddingBatch) (attempt, *adapters.EmbeddingsAnswer, bool) {
	var a attempt
	for {
		n := g.nextNode(x, st)
		if n == nil {
			return a, nil, false
		}
		if x.attempts > 0 {
			g.metrics.retries[st.lastReason].Inc()
			time.Sleep(g.backoff(x.attempts))
		}
		a = g.send(x, ur, n)
		if a.err != nil || adapters.RetryableStatus(a.resp.Status) {
			g.attemptFailed(x, st, a)
			if st.final {
				return a, nil, false
			}
			continue
		}
		if a.resp.Status >= 400 {
			g.answeredBy(x, a)
			return a, nil, true
		}
		ans, err := adapters.ParseEmbeddingsAnswer(a.resp.Body, len(b.send))
		if err == nil {
			if err = b.sameDimensions(ans); err == nil {
				g.answeredBy(x, a)
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
		g.pool.Report(n, outcome, 0)
		st.lastErr = adapters.UpstreamError("upstream " + n.Name() + " failed: " + err.Error())
		st.lastReason = "malformed"
		g.badEmbeddings(x.id, n.Name(), err)
		if st.final {
			return a, nil, false
		}
	}
}

// sameDimensions reports an error unless ans's vectors are as long as the
// cached ones of the batch.
func (b *embeddingBatch) sameDimensions(ans *adapters.EmbeddingsAnswer) error {
	for _, e := range b.hits {
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
func (g *Gateway) badEmbeddings(id, node string, err error) {
	g.emb.badAnswers.Inc()
	g.upLog.Warn(badEmbeddingsReason+":"+node, "upstream answer refused", "reason", badEmbeddingsReason, "node", node, "request_id", id, "error", err.Error())
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
		g.writeError(ctx, a.backend.MapError(resp.Status, resp.Body))
		return
	}
	g.settle(x, ans.Usage, ans.Usage.TotalTokens > 0 || ans.Usage.PromptTokens > 0)
	model := ans.Model
	if model == "" {
		model = x.model
	}
	if b.whole { // the node's answer, as it is: checked, so valid JSON
		g.passOn(ctx, resp)
	} else {
		saved := g.savedByCache(ctx, x, b)
		vecs := make([]adapters.Embedding, len(b.req.Inputs))
		at := make(map[string]int, len(b.send))
		for j, i := range b.send {
			at[b.keys[i]] = j
		}
		for i := range vecs {
			if e := b.hits[i]; e != nil {
				vecs[i] = entryEmbedding(e)
			} else {
				vecs[i] = ans.Vectors[at[b.keys[i]]]
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
	g.storeEmbeddings(b, model, ans)
}

// passOn sends the node's answer to the client as it is.
func (g *Gateway) passOn(ctx *fasthttp.RequestCtx, resp *adapters.UpstreamResponse) {
	ctx.SetStatusCode(resp.Status)
	ctx.Response.Header.SetContentTypeBytes(resp.ContentType)
	ctx.SetBody(resp.Body)
}

// storeEmbeddings queues one entry per input the node computed. Each
// entry's usage is its share of the answer's prompt tokens, by the inputs'
// lengths (exact for one input): what a later hit on it saves.
func (g *Gateway) storeEmbeddings(b *embeddingBatch, model string, ans *adapters.EmbeddingsAnswer) {
	p := b.plan
	if !p.store || b.keys == nil {
		return
	}
	weights, sum := make([]int, len(b.send)), 0
	for j, i := range b.send {
		w := 4 * b.req.InputTokens(i)
		if w < 0 {
			w = len(b.req.InputText(i))
		}
		weights[j], sum = w, sum+w
	}
	now, left := time.Now(), ans.Usage.PromptTokens
	for j, i := range b.send {
		tokens := left
		if j < len(b.send)-1 && sum > 0 {
			tokens = ans.Usage.PromptTokens * weights[j] / sum
		}
		left -= tokens
		v := ans.Vectors[j]
		e := &cache.Entry{ID: cache.NewEntryID(), Namespace: p.namespace, Model: model, Endpoint: cache.EndpointEmbeddings,
			Usage: cache.Usage{PromptTokens: tokens, TotalTokens: tokens}, Created: now, ExactKey: b.keys[i], Tag: p.tag,
			Embedding: adapters.EncodeFloat32s(v.Vector), EmbeddingWide: v.Wide}
		g.backend.Enqueue(cache.Write{Entry: e, TTL: p.ttl}, nil)
	}
}
