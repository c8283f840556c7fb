package router

import (
	"log/slog"
	"sync"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/valyala/fasthttp"

	"frontdoor/adapters"
	"frontdoor/balancer"
	"frontdoor/router/reuse"
)

// The Responses API's state. POST /v1/responses runs the chat path
// (serveInference with adapters.EndpointResponses); what differs lives
// here, in responsesFeature, which hooks into the request's life
// (requestHooks): which requests the cache must not answer (responsesBypass), the
// ids of the responses created through the gateway and who holds each
// (a node, the hosted API, or the cache), the routing of a follow-up
// (previous_response_id) to the node that holds its predecessor, and
// GET/DELETE /v1/responses/{id}.

// responsesBypass is why the cache must neither answer nor store a
// Responses request: its answer depends on state the request does not
// carry, or has effects the cache would skip. reasonNone otherwise.
func responsesBypass(x *exchange) reuse.Reason {
	if x.endpoint != adapters.EndpointResponses {
		return reuse.ReasonNone
	}
	switch req := x.req; {
	case req.PreviousResponseID != "":
		return reuse.ReasonPrevResp
	case req.ServerState:
		return reuse.ReasonServerState
	case req.Background:
		return reuse.ReasonBackground
	case req.HasTools:
		return reuse.ReasonTools
	}
	return reuse.ReasonNone
}

// responsesFeature is the Responses API's state, hooked into the
// request's life (requestHooks) and answering GET/DELETE
// /v1/responses/{id} (serveStored). It holds what it needs of the
// gateway, narrowly.
type responsesFeature struct {
	ids        *responseIDs // who holds each response passed on
	conf       func() *Config
	log        *slog.Logger
	writeError func(ctx *fasthttp.RequestCtx, e *adapters.APIError)
	// admit names the tenant of a request and admits it; ok false: it
	// wrote the refusal. release ends the admission.
	admit func(ctx *fasthttp.RequestCtx) (tenant string, release func(), ok bool)
	// backend is the backend of the node or hosted API named upstream,
	// nil when it is gone or cannot answer for stored responses.
	backend   func(upstream string) adapters.StoredResponses
	badAnswer func(reqID, upstream string, err error) bool
	cache     *reuse.Cache // a replayed response's entry
}

// beforeLookup holds a request that names server-side state (ownState)
// and tells the cache why it must not answer it (responsesBypass).
func (f *responsesFeature) beforeLookup(ctx *fasthttp.RequestCtx, x *exchange) (reuse.Reason, bool) {
	if !f.ownState(ctx, x) {
		return reuse.ReasonNone, false
	}
	return responsesBypass(x), true
}

// answered remembers the response a node (or the hosted API) created in
// a JSON answer.
func (f *responsesFeature) answered(x *exchange, body []byte) {
	if x.endpoint == adapters.EndpointResponses {
		f.noteCreated(x, adapters.ResponseID(body))
	}
}

// respRecord is what the gateway remembers of one response it passed on:
// who holds it, for whom.
type respRecord struct {
	id       string
	tenant   string
	upstream string // the node (or spill-over) that created it; "" when the cache served it
	entry    string // the cache entry a replayed response came from
	hit      bool   // a replayed response was a cache hit: a GET shows its usage all cached, as served
	model    string
	created  int64
	expires  time.Time
	// A replayed response's request input and answer, for a follow-up
	// (see continueReplayed); nil once the budget needed the room.
	input  []byte
	output string
}

// A replayed response keeps its request's input and its answer for a
// follow-up when they fit in replayedMax, and at most replayedBudget bytes
// of them are kept (the oldest go first).
const (
	replayedMax    = 64 << 10
	replayedBudget = 32 << 20
)

// responseIDs remembers, for responses.remember_for and at most
// responses.remember_ids of them (the oldest go first), which upstream
// created each response id, or which cache entry a replayed one came
// from. It is per replica: see docs/config.md#responses.
type responseIDs struct {
	mu   sync.Mutex
	m    map[string]*respRecord
	ring []*respRecord // in the order remembered, grown as ids come up to max; a full ring forgets its oldest
	max  int
	next int
	ttl  time.Duration

	kept      []*respRecord // records holding an input and output, oldest first
	keptBytes int

	shared *sharedIDs // nil: this replica's memory only

	responseIDMetrics
}

// stateRefusal is why a request naming server-side state is refused.
type stateRefusal struct {
	field  string // previous_response_id, conversation, prompt, item_reference
	reason string // unknown, other_tenant
}

// refusedStates lists the refusals counted: a previous response can be
// unknown or another tenant's; frontdoor keeps no record of the other
// kinds, so naming one is always unknown.
var refusedStates = []stateRefusal{
	{"previous_response_id", "unknown"}, {"previous_response_id", "other_tenant"},
	{string(adapters.StateConversation), "unknown"}, {string(adapters.StatePrompt), "unknown"}, {string(adapters.StateItem), "unknown"},
}

func newResponseIDs(cfg ResponsesConfig, set *metrics.Set) *responseIDs {
	r := &responseIDs{m: map[string]*respRecord{}, max: max(cfg.RememberIDs, 0), ttl: cfg.RememberFor.D()}
	r.responseIDMetrics = newResponseIDMetrics(set, func() float64 {
		r.mu.Lock()
		defer r.mu.Unlock()
		return float64(len(r.m))
	})
	return r
}

// remember records a response; an id already known keeps its first
// record (a coalesced follower shares its leader's id). A node's record
// is shared with the other replicas when they share a Redis.
func (r *responseIDs) remember(rec *respRecord) {
	if r.max == 0 || rec.id == "" {
		return
	}
	rec.expires = time.Now().Add(r.ttl)
	if r.shared != nil {
		// Before the client has the id: its next request may reach
		// another replica.
		r.shared.put(rec, r.ttl)
	}
	r.local(rec)
}

// local records rec in this replica's memory.
func (r *responseIDs) local(rec *respRecord) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.m[rec.id]; ok {
		return
	}
	if len(r.ring) < r.max {
		// The ring grows with use: a gateway that never sees the
		// Responses API holds no slots (100,000 pointers at the default,
		// which the collector would scan at every cycle).
		r.ring = append(r.ring, rec)
	} else {
		if old := r.ring[r.next]; r.m[old.id] == old {
			delete(r.m, old.id)
		}
		r.ring[r.next] = rec
		r.next = (r.next + 1) % r.max
	}
	r.m[rec.id] = rec
	if rec.input != nil {
		r.kept = append(r.kept, rec)
		r.keptBytes += len(rec.input) + len(rec.output)
		for r.keptBytes > replayedBudget {
			old := r.kept[0]
			r.kept[0] = nil
			r.kept = r.kept[1:]
			r.keptBytes -= len(old.input) + len(old.output)
			old.input, old.output = nil, ""
		}
	}
}

// lookup returns the live record of id for tenant, or nil: an id another
// tenant created is unknown to this one. An id this replica does not know
// is looked up in the shared Redis, when there is one.
func (r *responseIDs) lookup(id, tenant string) *respRecord {
	rec, _ := r.find(id, tenant)
	return rec
}

// find is lookup with the reason of a nil record: "unknown" (never passed
// on, expired, deleted, forgotten, or unreadable in Redis) or
// "other_tenant".
func (r *responseIDs) find(id, tenant string) (*respRecord, string) {
	r.mu.Lock()
	rec := r.m[id]
	if rec != nil && time.Now().After(rec.expires) {
		delete(r.m, id)
		rec = nil
	}
	r.mu.Unlock()
	if rec == nil && r.shared != nil && r.max > 0 {
		if rec = r.shared.get(id); rec != nil {
			r.local(rec)
		}
	}
	switch {
	case rec == nil:
		return nil, "unknown"
	case rec.tenant != tenant:
		return nil, "other_tenant"
	}
	return rec, ""
}

// forget drops id (its response was deleted), here and in the shared Redis.
func (r *responseIDs) forget(id string) {
	r.mu.Lock()
	delete(r.m, id)
	r.mu.Unlock()
	if r.shared != nil {
		r.shared.del(id)
	}
}

// noteCreated remembers a response a node (or the hosted API) created for
// x; one with store: false is kept by no one and not remembered.
func (f *responsesFeature) noteCreated(x *exchange, id string) {
	if x.endpoint != adapters.EndpointResponses || x.req == nil || x.req.StoreOff || id == "" {
		return
	}
	f.ids.remember(&respRecord{id: id, tenant: x.tenant.name, upstream: x.upstream, model: x.model})
}

// replayed remembers a response the cache served under a fresh id,
// with its request's input and its answer for a follow-up.
func (f *responsesFeature) replayed(x *exchange, id string, created int64, a *adapters.Answer) {
	if x.endpoint != adapters.EndpointResponses || x.req.StoreOff || x.entryID == "" {
		return
	}
	rec := &respRecord{id: id, tenant: x.tenant.name, entry: x.entryID, model: a.Model, created: created,
		hit: x.cache.Result == reuse.ResultHitExact || x.cache.Result == reuse.ResultHitSemantic}
	if in := x.req.InputJSON(); len(in)+len(a.Content) <= replayedMax {
		rec.input, rec.output = in, a.Content
	}
	f.ids.remember(rec)
}

// ownState is where a Responses request that names server-side state
// (previous_response_id, a conversation, a stored prompt template, an
// item_reference) is held before any node sees it: each must be state
// frontdoor passed on for the same tenant. Another tenant's id and an id
// frontdoor does not know get the same 404, so a client cannot tell them
// apart; responses.forward_unknown_ids lets unknown ones through (never
// another tenant's). A follow-up of a response the cache served becomes a
// request of its own (continueReplayed). It answers and returns false
// when the request may not go on.
func (f *responsesFeature) ownState(ctx *fasthttp.RequestCtx, x *exchange) bool {
	if x.endpoint != adapters.EndpointResponses {
		return true
	}
	forward := f.conf().Responses.ForwardUnknownIDs
	if id := x.req.PreviousResponseID; id != "" {
		rec, why := f.ids.find(id, x.tenant.name)
		if rec == nil && (why != "unknown" || !forward) {
			f.ids.refusedState[stateRefusal{"previous_response_id", why}].Inc()
			f.writeError(ctx, &adapters.APIError{Status: 404, Type: adapters.TypeInvalidRequest, Param: "previous_response_id",
				Code: "previous_response_not_found", Message: "Previous response with id '" + id + "' not found."})
			return false
		}
		if rec != nil && rec.upstream == "" && !f.continueReplayed(ctx, x, rec) {
			return false
		}
	}
	if forward {
		return true
	}
	for _, ref := range x.req.StateRefs {
		// frontdoor keeps no record of conversations, prompt templates or
		// items: it cannot tell whose they are.
		f.ids.refusedState[stateRefusal{string(ref.Kind), "unknown"}].Inc()
		f.writeError(ctx, errStateNotFound(ref))
		return false
	}
	return true
}

// errStateNotFound is the 404 of a reference to state frontdoor does not
// know for the tenant.
func errStateNotFound(ref adapters.StateRef) *adapters.APIError {
	what := map[adapters.StateKind]string{adapters.StateConversation: "Conversation", adapters.StatePrompt: "Prompt",
		adapters.StateItem: "Item"}[ref.Kind]
	msg := what + " with id '" + ref.ID + "' not found."
	if ref.ID == "" {
		msg = what + " not found: frontdoor forwards no " + string(ref.Kind) + " it did not pass on for this tenant."
	}
	return &adapters.APIError{Status: 404, Type: adapters.TypeInvalidRequest, Param: ref.Param, Message: msg}
}

// continueReplayed makes a follow-up of rec, a response the cache served
// (no node holds it), a request of its own: the predecessor's input and
// answer go before its input, as the Responses API would have put them. It
// answers 400 and returns false when they are no longer kept.
func (f *responsesFeature) continueReplayed(ctx *fasthttp.RequestCtx, x *exchange, rec *respRecord) bool {
	f.ids.mu.Lock()
	input, output := rec.input, rec.output
	f.ids.mu.Unlock()
	var err error
	if input != nil {
		err = x.req.Continue(input, output)
	}
	if input == nil || err != nil {
		f.writeError(ctx, adapters.BadRequest("previous_response_id", "Previous response with id '"+rec.id+
			"' was served from frontdoor's cache and its conversation is no longer kept; send the conversation as input instead."))
		return false
	}
	return true
}

// respTap reads a Responses stream's events as the pump passes them on:
// the response id (remembered as soon as it is known) and the usage of the
// terminal event.
type respTap struct {
	onID       func(id string)
	idSeen     bool
	u          adapters.Usage
	usageKnown bool
}

func (t *respTap) see(ev *adapters.SSEEvent) {
	re, ok := adapters.ReadResponseEvent(ev)
	if !ok {
		return
	}
	if !t.idSeen && re.ID != "" {
		t.idSeen = true
		t.onID(re.ID)
	}
	if re.HasUsage {
		t.u, t.usageKnown = re.Usage, true
	}
}

func (t *respTap) usage() (adapters.Usage, bool) { return t.u, t.usageKnown }

// streamTap is the tap of x's stream, nil for other endpoints.
func (f *responsesFeature) streamTap(x *exchange) eventTap {
	if x.endpoint != adapters.EndpointResponses {
		return nil
	}
	return &respTap{onID: func(id string) { f.noteCreated(x, id) }}
}

// pick puts first, alone, the node that holds the response a
// follow-up continues (previous_response_id): no other node knows it.
// When that node is not among the candidates (busy, unhealthy, gone) or
// the id is unknown here, the candidates stand, and the node that gets the
// request answers for itself.
func (f *responsesFeature) pick(x *exchange, cands []*balancer.Node) []*balancer.Node {
	if x.endpoint != adapters.EndpointResponses || x.req.PreviousResponseID == "" {
		return cands
	}
	rec := f.ids.lookup(x.req.PreviousResponseID, x.tenant.name)
	if rec == nil || rec.upstream == "" {
		return cands
	}
	for _, n := range cands {
		if n.Name() == rec.upstream {
			return []*balancer.Node{n}
		}
	}
	return cands
}
