package reuse

import (
	"context"
	"time"

	"frontdoor/adapters"
	"frontdoor/cache"
	"frontdoor/internal/telemetry"
)

// An embeddings request has a cache of its own: each input is an exact
// entry holding its vector, so a batch whose inputs are partly cached
// sends only the others upstream. There is no semantic lookup and no
// coalescing of identical requests.

// Inputs are an embeddings request's inputs as the cache sees them.
type Inputs struct {
	Outcome Outcome
	Keys    []string       // each input's exact key; nil when the cache is not used
	Hits    []*cache.Entry // by input: the cached vector, or nil
	Send    []int          // the inputs the node computes: the first of each key missing
	// Whole: Send is every input in order, and the client's body goes
	// upstream as it came (but for an alias's model name); the node's
	// answer is then passed on as it is.
	Whole bool
}

// PlanEmbeddings decides how the cache treats an embeddings request: its
// inputs are looked up and stored unless the cache is off, the exact cache
// is disabled, or Cache-Control says otherwise.
func (c *Cache) PlanEmbeddings(r Request, h Hints) *Plan {
	conf := c.conf()
	p := &Plan{id: r.ID, tenant: r.Tenant, namespace: r.Namespace, model: r.Model, endpoint: cache.EndpointEmbeddings,
		apiEndpoint: adapters.EndpointEmbeddings, ttl: planTTL(conf, h), only: h.only, tag: h.tag, keyOpt: conf.KeyOptions()}
	switch {
	case c.store == nil:
		p.reason = ReasonOff
	case h.noStore:
		p.reason = ReasonNoStore
	case !conf.Exact.Enabled:
		p.reason = ReasonDisabled
	default:
		p.store, p.lookup = true, !h.noCache
		if h.noCache {
			p.reason = ReasonNoCache
		}
	}
	return p
}

// LookupInputs looks each input of er up (when p says to) and lists the
// inputs the node must compute.
func (c *Cache) LookupInputs(obs *telemetry.Request, p *Plan, er *adapters.EmbeddingsRequest) *Inputs {
	n := len(er.Inputs)
	in := &Inputs{Outcome: Outcome{ResultBypass, p.reason}}
	if p.store {
		in.Keys = cache.EmbeddingKeys(p.namespace, p.model, er.Root(), er.Inputs, p.keyOpt)
	}
	if p.lookup {
		s := obs.Lookup("exact")
		entries, err := c.backend.GetMany(context.Background(), in.Keys)
		if err != nil {
			in.Outcome = Outcome{ResultBypass, storeErrorReason(err)} // the answers are still stored
		} else {
			in.Hits = make([]*cache.Entry, n)
			for i, e := range entries {
				if usableEmbedding(e, p.namespace, er.Dimensions) {
					in.Hits[i] = e
				}
			}
		}
		s.LookedUp(err == nil && countHits(in.Hits) == n)
	} else if p.store {
		in.Outcome = Outcome{ResultMiss, p.reason}
	}
	first := map[string]bool{}
	for i := range n {
		switch {
		case in.Hits != nil && in.Hits[i] != nil:
		case in.Keys == nil:
			in.Send = append(in.Send, i)
		case !first[in.Keys[i]]:
			first[in.Keys[i]] = true
			in.Send = append(in.Send, i)
		}
	}
	in.Whole = len(in.Send) == n
	if in.Hits == nil {
		return in
	}
	hits := countHits(in.Hits)
	c.emb.hits.Add(hits)
	c.emb.misses.Add(n - hits)
	switch {
	case len(in.Send) == 0:
		in.Outcome = Outcome{Result: ResultHitExact}
	case hits > 0:
		in.Outcome = Outcome{Result: ResultPartial}
	default:
		in.Outcome = Outcome{Result: ResultMiss}
	}
	return in
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

// Saved counts the tokens of the cached inputs (what computing them
// cost) as saved, and returns them and how many inputs were cached.
func (c *Cache) Saved(in *Inputs) (tokens, hits int) {
	for _, e := range in.Hits {
		if e != nil {
			tokens, hits = tokens+e.Usage.PromptTokens, hits+1
		}
	}
	c.m.tokensSaved.Add(tokens)
	return tokens, hits
}

// StoreInputs queues one entry per input the node computed. Each entry's
// usage is its share of the answer's prompt tokens, by the inputs'
// lengths (exact for one input): what a later hit on it saves.
func (c *Cache) StoreInputs(p *Plan, in *Inputs, er *adapters.EmbeddingsRequest, model string, ans *adapters.EmbeddingsAnswer) {
	if !p.store || in.Keys == nil {
		return
	}
	weights, sum := make([]int, len(in.Send)), 0
	for j, i := range in.Send {
		w := 4 * er.InputTokens(i)
		if w < 0 {
			w = len(er.InputText(i))
		}
		weights[j], sum = w, sum+w
	}
	now, left := time.Now(), ans.Usage.PromptTokens
	for j, i := range in.Send {
		tokens := left
		if j < len(in.Send)-1 && sum > 0 {
			tokens = ans.Usage.PromptTokens * weights[j] / sum
		}
		left -= tokens
		v := ans.Vectors[j]
		e := &cache.Entry{ID: cache.NewEntryID(), Namespace: p.namespace, Model: model, Endpoint: cache.EndpointEmbeddings,
			Usage: cache.Usage{PromptTokens: tokens, TotalTokens: tokens}, Created: now, ExactKey: in.Keys[i], Tag: p.tag,
			Embedding: adapters.EncodeFloat32s(v.Vector), EmbeddingWide: v.Wide}
		c.backend.Enqueue(cache.Write{Entry: e, TTL: p.ttl}, nil)
	}
}
