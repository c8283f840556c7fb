package router

// Every metric family of the router is declared here, once, beside its
// help text, and every series of them is made here, into the fields of
// the struct of the stage that counts it (gatewayMetrics, cacheMetrics,
// cacheObserver, embeddingMetrics, bodyRefusals, transportRefusals,
// passthroughCounters, reloader, responseIDs, sharedIDs, spillover,
// verifier, and the gauges that read the gateway's live state). The
// stages only count. Families of other packages are declared there
// (admission, balancer, internal/telemetry).

import (
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/valyala/fasthttp"

	"frontdoor/adapters"
	"frontdoor/admission"
	"frontdoor/cache"
	"frontdoor/internal/telemetry"
)

var (
	// Requests (gatewayMetrics, bodyRefusals, transportRefusals, passthroughCounters).
	requestsFamily = telemetry.NewFamily("frontdoor_requests_total",
		"Inference requests answered, by endpoint (chat, completions, embeddings, passthrough) and HTTP status code.")
	requestDurationFamily = telemetry.NewFamily("frontdoor_request_duration_seconds",
		"Time from request arrival to the end of the handler (streams: to the start of the stream), by endpoint.")
	retriesFamily = telemetry.NewFamily("frontdoor_retries_total",
		"Upstream attempts retried on another node, by why the previous attempt failed.")
	clientAbortsFamily = telemetry.NewFamily("frontdoor_client_aborts_total",
		"Streams whose client went away before the end.")
	streamErrorsFamily = telemetry.NewFamily("frontdoor_stream_errors_total",
		"Upstream streams that broke before their end.")
	streamsActiveFamily = telemetry.NewFamily("frontdoor_streams_active",
		"Streams being sent to clients now.")
	badAnswersFamily = telemetry.NewFamily("frontdoor_upstream_bad_answers_total",
		"Node answers not passed on as sent, by reason: too_large (over limits.max_upstream_body_bytes; 502), malformed (cut or not a JSON completion; retried, else 502), sse_converted (an event stream for a non-streaming request, converted to JSON), invalid_embeddings (an embeddings answer with a non-finite number, vectors of mixed or wrong length, or missing, extra or duplicate items; retried, else 502; never cached).")
	tokensFamily = telemetry.NewFamily("frontdoor_tokens_total",
		"Tokens of answers, by tenant, kind (prompt, completion) and source (upstream, cache).")
	transportRefusalsFamily = telemetry.NewFamily("frontdoor_transport_refusals_total",
		"Requests refused at the HTTP layer with a close, by reason: framing (ambiguous length, Trailer header), trailers (fields after a chunked body), expect_too_large and expect_auth (answered instead of 100 Continue), admin_origin (the admin listener: a DNS name in Host, or a browser acting for another site).")
	bodiesRefusedFamily = telemetry.NewFamily("frontdoor_request_bodies_refused_total",
		"Inference requests refused because two JSON readers could read their body differently, by reason (duplicate_key, invalid_utf8, invalid_unicode_escape).")
	passthroughRequestsFamily = telemetry.NewFamily("frontdoor_passthrough_requests_total",
		"Requests to pass-through paths, by the passthrough.paths entry they fall under.")
	configReloadsFamily = telemetry.NewFamily("frontdoor_config_reloads_total",
		"Config reloads (SIGHUP or POST /admin/reload), by result: applied or refused.")

	// The parse budget (limits.parse_budget_bytes; admission.ByteBudget).
	parseBudgetBytesFamily = telemetry.NewFamily("frontdoor_parse_budget_bytes",
		"Bytes of limits.parse_budget_bytes held now by the request bodies being parsed and served (each charged 4 bytes a body byte and 128 a JSON value until its request ends).")
	parseBudgetCapacityFamily = telemetry.NewFamily("frontdoor_parse_budget_capacity_bytes",
		"The parse budget (limits.parse_budget_bytes).")
	parseBudgetWaitsFamily = telemetry.NewFamily("frontdoor_parse_budget_waits_total",
		"Requests that found the parse budget full and waited (limits.parse_wait).")
	parseBudgetRefusedFamily = telemetry.NewFamily("frontdoor_parse_budget_refused_total",
		"Requests refused by the parse budget, by reason: full (it stayed full for limits.parse_wait: 503), too_large (the body alone costs more than the budget: 413).")

	// The cache (cacheMetrics, cacheObserver, embeddingMetrics, the backend's gauges).
	cacheRequestsFamily = telemetry.NewFamily("frontdoor_cache_requests_total",
		"Cache outcomes of inference requests, by result (hit_exact, hit_semantic, miss, bypass, partial: an embeddings batch partly cached) and reason.")
	cacheErrorsFamily = telemetry.NewFamily("frontdoor_cache_errors_total",
		"Cache store and embedder errors, by operation.")
	cacheGuardRejectionsFamily = telemetry.NewFamily("frontdoor_cache_guard_rejections_total",
		"Semantic candidates refused by a guard (numbers, negation, order, entity).")
	cacheSimilarityFamily = telemetry.NewFamily("frontdoor_cache_similarity",
		"Cosine similarity of the best semantic candidate of each semantic lookup that has one at or above the threshold less the grey zone less 0.1 (the near misses a threshold is tuned by).")
	cacheTokensSavedFamily = telemetry.NewFamily("frontdoor_cache_tokens_saved_total",
		"Upstream tokens (prompt + completion) not spent because the cache answered.")
	cacheSemanticSkippedFamily = telemetry.NewFamily("frontdoor_cache_semantic_skipped_total",
		"Requests looked up and stored by their exact key only, by reason: query_too_long (a last user turn longer than cache.embedder.max_input_bytes).")
	cacheEntriesFamily = telemetry.NewFamily("frontdoor_cache_entries",
		"Entries in the cache store (refreshed every few seconds).")
	cacheVectorEntriesFamily = telemetry.NewFamily("frontdoor_cache_vector_entries",
		"Entries with an embedding in the cache store (refreshed every few seconds).")
	cacheBytesFamily = telemetry.NewFamily("frontdoor_cache_bytes",
		"Bytes used by the cache store, as the store reports them.")
	cacheEmbeddingInputsFamily = telemetry.NewFamily("frontdoor_cache_embedding_inputs_total",
		"Inputs of embeddings requests looked up in the cache, by result (hit, miss).")
	cacheEmbedSkippedFamily = telemetry.NewFamily("frontdoor_cache_embed_skipped_total",
		"Semantic lookups skipped because the embedder failed, timed out or its breaker was open.")
	cacheLookupFamily = telemetry.NewFamily("frontdoor_cache_lookup_seconds",
		"Latency of cache store lookups, by operation (get, search).")
	cacheWritesFamily = telemetry.NewFamily("frontdoor_cache_writes_total",
		"Cache write-backs, by result (stored, failed).")
	cacheWritesDroppedFamily = telemetry.NewFamily("frontdoor_cache_writes_dropped_total",
		"Cache write-backs dropped before reaching the store, by reason: the store's (queue_full, breaker_open, shutdown) or an answer unfit to store (stream_error, stream_incomplete, stream_cut, client_gone).")
	cacheBreakerTransitionsFamily = telemetry.NewFamily("frontdoor_cache_breaker_transitions_total",
		"State changes of the cache store's read and write breakers.")
	cacheIndexSyncErrorsFamily = telemetry.NewFamily("frontdoor_cache_index_sync_errors_total",
		"Failed steps of the in-process vector index's sync with Redis (backend redis without RediSearch): it misses other replicas' entries until it recovers.")
	cacheEmbedderUpFamily = telemetry.NewFamily("frontdoor_cache_embedder_up",
		"1 when the embedder answered lately, 0 while it fails.")
	cacheBackendUpFamily = telemetry.NewFamily("frontdoor_cache_backend_up",
		"1 while the cache store answers, 0 while it is bypassed.")
	cacheBackendStateFamily = telemetry.NewFamily("frontdoor_cache_backend_state",
		"1 for the cache backend's current state (ok, degraded, bypassed).")
	cacheWriteQueueFamily = telemetry.NewFamily("frontdoor_cache_write_queue",
		"Cache write-backs waiting in the queue.")

	// The judge (verifier).
	verifyFamily = telemetry.NewFamily("frontdoor_cache_verify_total",
		"Semantic hits re-checked by the judge model, by verdict (yes: the cached answer served the question; no: a false hit; unsure; error).")
	verifyDroppedFamily = telemetry.NewFamily("frontdoor_cache_verify_dropped_total",
		"Audits of semantic hits and checks of near-misses dropped because the judge queue was full.")
	verifyPromotedFamily = telemetry.NewFamily("frontdoor_cache_verify_promoted_total",
		"Approved near-misses stored with a curated answer (promotions; docs/verify.md).")
	verifyPromoteRefusedFamily = telemetry.NewFamily("frontdoor_cache_verify_promote_refused_total",
		"Promotions of a judged near-miss to a curated answer refused, by reason: lookup_only (no upstream call), not_stored (its own answer was not stored), per_minute and max (the tenant's promote_per_minute and promote_max), unavailable (the shared count in Redis failed).")
	falseHitRatioFamily = telemetry.NewFamily("frontdoor_cache_false_hit_ratio",
		"Share of judged semantic hits that were wrong (no over yes+no), since start.")

	// Spill-over (spillover).
	spilloverFamily = telemetry.NewFamily("frontdoor_spillover_total",
		"Requests sent to the hosted spill-over API, by reason (saturated, failed, predicted_slo) and local model.")
	spilloverInflightFamily = telemetry.NewFamily("frontdoor_spillover_inflight",
		"Requests at the hosted spill-over API now.")
	spilloverSkippedFamily = telemetry.NewFamily("frontdoor_spillover_skipped_total",
		"Requests spill-over would have taken but not to their endpoint (reason endpoint: /v1/responses with spillover.responses false); answered 503.")

	// Responses ids (responseIDs, sharedIDs).
	responsesByIDFamily = telemetry.NewFamily("frontdoor_responses_by_id_total",
		"GET, DELETE and cancel of /v1/responses/{id}, by result: found (sent to the node that created it, or rendered from the cache), unknown (an id not remembered for this tenant: 404), holder_gone (its node or cache entry is gone: 404).")
	responsesRefusedFamily = telemetry.NewFamily("frontdoor_responses_refused_total",
		"Responses requests answered 404 before any node saw them because they name state not held for the tenant, by field (previous_response_id, conversation, prompt, item_reference) and reason (unknown, other_tenant).")
	responsesSharedErrorsFamily = telemetry.NewFamily("frontdoor_responses_shared_errors_total",
		"Failed reads and writes of the response id records the replicas share in Redis (cache.backend: redis), by op (put, get, del); each replica then knows only the ids it passed on.")
	responsesRememberedFamily = telemetry.NewFamily("frontdoor_responses_remembered",
		"Response ids remembered (responses.remember_ids), each with the node or cache entry that holds it.")
)

// gatewayMetrics are the request-level metrics. Labelled counters are made
// once per label set and kept, so the hot path never formats a name.
type gatewayMetrics struct {
	set          *metrics.Set
	retries      map[string]*metrics.Counter // by the reason of the failed attempt
	clientAborts *metrics.Counter
	streamErrors *metrics.Counter
	refused      *transportRefusals
	badAnswers   map[string]*metrics.Counter // by badAnswerReasons
	streams      atomic.Int64
	// upstreamAnswers counts answers from local nodes, for the spill ratio.
	upstreamAnswers                    atomic.Int64
	classes2xx, classes4xx, classes5xx atomic.Int64
	rejected                           atomic.Int64 // 429 and 503 answers: refused for lack of quota or capacity
	ttft                               ttftWindow
	dash                               dashCounts // for the dashboard's history

	// tokens[tenant] = prompt/upstream, completion/upstream, prompt/cache, completion/cache
	tokens atomic.Pointer[map[string]*[4]*metrics.Counter]

	mu        sync.Mutex
	requests  [adapters.NumEndpoints][600]atomic.Pointer[metrics.Counter]
	durations [adapters.NumEndpoints]*metrics.PrometheusHistogram
}

// endpointLabel is the endpoint label, by adapters.Endpoint.
var endpointLabel = [adapters.NumEndpoints]string{
	adapters.EndpointChat:        "chat",
	adapters.EndpointCompletion:  "completions",
	adapters.EndpointResponses:   "responses",
	adapters.EndpointEmbeddings:  "embeddings",
	adapters.EndpointPassthrough: "passthrough",
}

// retryReasons label frontdoor_retries_total: why the previous attempt failed.
var retryReasons = []string{"connect", "timeout", "closed", "malformed", "status_429", "status_5xx", "other"}

// badAnswerReasons label frontdoor_upstream_bad_answers_total: answers not
// passed on as the node sent them.
var badAnswerReasons = []string{"too_large", "malformed", "sse_converted"}

func newGatewayMetrics(set *metrics.Set, g *Gateway) *gatewayMetrics {
	m := &gatewayMetrics{
		set:          set,
		retries:      map[string]*metrics.Counter{},
		clientAborts: clientAbortsFamily.NewCounter(set),
		streamErrors: streamErrorsFamily.NewCounter(set),
		refused:      newTransportRefusals(set, g.log),
		badAnswers:   map[string]*metrics.Counter{},
	}
	for _, r := range badAnswerReasons {
		m.badAnswers[r] = badAnswersFamily.NewCounter(set, "reason", r)
	}
	for i, ep := range endpointLabel {
		m.durations[i] = requestDurationFamily.NewHistogram(set, nil, "endpoint", ep)
	}
	for _, r := range retryReasons {
		m.retries[r] = retriesFamily.NewCounter(set, "reason", r)
	}
	m.setTenants(g.conf().Tenants)
	streamsActiveFamily.NewGauge(set, func() float64 { return float64(m.streams.Load()) })
	g.pool.RegisterMetrics(set)
	telemetry.RegisterBuildInfo(set)
	return m
}

// setTenants adds the token counters of tenants a reload brought.
func (m *gatewayMetrics) setTenants(tenants []Tenant) {
	names := []string{DefaultTenant}
	for _, t := range tenants {
		names = append(names, t.Name)
	}
	tokens := map[string]*[4]*metrics.Counter{}
	for _, name := range names {
		var cs [4]*metrics.Counter
		for i, kind := range []string{"prompt", "completion", "prompt", "completion"} {
			source := "upstream"
			if i >= 2 {
				source = "cache"
			}
			cs[i] = tokensFamily.GetOrCreateCounter(m.set, "tenant", name, "kind", kind, "source", source)
		}
		tokens[name] = &cs
	}
	m.tokens.Store(&tokens)
	m.dash.setTenants(names)
}

func (m *gatewayMetrics) requestCounter(ep, status int) *metrics.Counter {
	if status < 100 || status >= 600 {
		status = 599
	}
	p := &m.requests[ep][status]
	if c := p.Load(); c != nil {
		return c
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if c := p.Load(); c != nil {
		return c
	}
	c := requestsFamily.GetOrCreateCounter(m.set, "endpoint", endpointLabel[ep], "code", strconv.Itoa(status))
	p.Store(c)
	return c
}

// observe counts a finished request, which took took.
func (m *gatewayMetrics) observe(x *exchange, took time.Duration) {
	ep := int(x.endpoint)
	m.requestCounter(ep, x.status).Inc()
	switch {
	case x.status >= 500:
		m.classes5xx.Add(1)
		if x.status == 503 {
			m.rejected.Add(1)
		}
	case x.status >= 400:
		m.classes4xx.Add(1)
		if x.status == 429 {
			m.rejected.Add(1)
		}
	default:
		m.classes2xx.Add(1)
	}
	m.durations[ep].Update(took.Seconds())
}

// countTokens adds an answer's tokens; source is "upstream" or "cache".
func (m *gatewayMetrics) countTokens(tenant, source string, prompt, completion int) {
	tokens := *m.tokens.Load()
	cs := tokens[tenant]
	if cs == nil {
		cs = tokens[DefaultTenant]
	}
	i := 0
	if source == "cache" {
		i = 2
	}
	cs[i].Add(prompt)
	cs[i+1].Add(completion)
	if i == 2 {
		m.dash.saved(tenant, prompt+completion)
	}
}

// classes returns the request counts by status class.
func (m *gatewayMetrics) classes() map[string]int {
	return map[string]int{"2xx": int(m.classes2xx.Load()), "4xx": int(m.classes4xx.Load()), "5xx": int(m.classes5xx.Load())}
}

func (m *gatewayMetrics) write(ctx *fasthttp.RequestCtx) {
	telemetry.WriteMetrics(ctx, m.set)
}

// ttftWindow keeps the recent times to first token of streamed answers
// from local nodes, for the p50 and p95 of /status.
type ttftWindow struct {
	mu   sync.Mutex
	at   [512]int64 // unix nanos
	v    [512]float64
	next int
}

func (w *ttftWindow) add(now time.Time, d time.Duration) {
	w.mu.Lock()
	w.at[w.next], w.v[w.next] = now.UnixNano(), d.Seconds()
	w.next = (w.next + 1) % len(w.at)
	w.mu.Unlock()
}

// quantiles returns the p50 and p95 of the samples newer than since, and
// their count.
func (w *ttftWindow) quantiles(since time.Time) (p50, p95 float64, n int) {
	vals := make([]float64, 0, len(w.v))
	w.mu.Lock()
	for i, at := range w.at {
		if at > since.UnixNano() {
			vals = append(vals, w.v[i])
		}
	}
	w.mu.Unlock()
	if len(vals) == 0 {
		return 0, 0, 0
	}
	slices.Sort(vals)
	q := func(p float64) float64 { return vals[min(len(vals)-1, int(p*float64(len(vals))))] }
	return q(0.5), q(0.95), len(vals)
}

// newTransportRefusals makes frontdoor_transport_refusals_total, a series
// per reason.
func newTransportRefusals(set *metrics.Set, log *slog.Logger) *transportRefusals {
	r := &transportRefusals{log: telemetry.NewRateLog(log, 10*time.Second), counter: map[string]*metrics.Counter{}}
	for _, reason := range []string{refusedFraming, refusedTrailers, refusedTooLarge, refusedAuth, refusedOrigin} {
		r.counter[reason] = transportRefusalsFamily.NewCounter(set, "reason", reason)
	}
	return r
}

// bodyMetrics are bodyRefusals' series: frontdoor_request_bodies_refused_total
// by reason, and the parse budget's.
type bodyMetrics struct {
	counts map[string]*metrics.Counter // by adapters.Code*
}

func newBodyMetrics(set *metrics.Set, budget *admission.ByteBudget) bodyMetrics {
	m := bodyMetrics{counts: map[string]*metrics.Counter{}}
	for _, code := range []string{adapters.CodeDuplicateKey, adapters.CodeInvalidUTF8, adapters.CodeInvalidEscape} {
		m.counts[code] = bodiesRefusedFamily.NewCounter(set, "reason", code)
	}
	budget.RegisterMetrics(set, admission.ByteBudgetFamilies{Bytes: parseBudgetBytesFamily,
		Capacity: parseBudgetCapacityFamily, Waits: parseBudgetWaitsFamily, Refused: parseBudgetRefusedFamily})
	return m
}

// passthroughCounters count pass-through requests by pattern.
type passthroughCounters struct {
	set *metrics.Set
	m   sync.Map // pattern -> *metrics.Counter
}

func (c *passthroughCounters) inc(pattern string) {
	v, ok := c.m.Load(pattern)
	if !ok {
		v, _ = c.m.LoadOrStore(pattern, passthroughRequestsFamily.GetOrCreateCounter(c.set, "path", pattern))
	}
	v.(*metrics.Counter).Inc()
}

// register makes frontdoor_config_reloads_total.
func (r *reloader) register(set *metrics.Set) {
	r.smu.Lock()
	r.ok = configReloadsFamily.GetOrCreateCounter(set, "result", "applied")
	r.bad = configReloadsFamily.GetOrCreateCounter(set, "result", "refused")
	r.smu.Unlock()
}

// cacheMetrics are the cache's Prometheus series.
type cacheMetrics struct {
	set         *metrics.Set
	requests    [numResults][numReasons]*metrics.Counter
	errs        map[string]*metrics.Counter
	guards      map[string]*metrics.Counter
	similarity  *metrics.PrometheusHistogram
	tokensSaved *metrics.Counter
	results     [numResults]atomic.Int64
	entries     atomic.Int64
	vectors     atomic.Int64
	bytes       atomic.Int64
	drops       atomic.Uint64 // write-backs dropped since start (the store's reasons)
	// notStored counts streamed answers unfit to store, by notStoredReasons;
	// not in drops, which is the store's health.
	notStored map[string]*metrics.Counter
	// longQueries counts requests whose last user turn is longer than the
	// embedder reads (cache.embedder.max_input_bytes): exact only.
	longQueries *metrics.Counter
}

var (
	cacheErrOps = []string{"get", "put", "search", "embed", "stats"}
)

func newCacheMetrics(set *metrics.Set) *cacheMetrics {
	m := &cacheMetrics{set: set, errs: map[string]*metrics.Counter{}, guards: map[string]*metrics.Counter{},
		notStored: map[string]*metrics.Counter{}}
	for _, r := range notStoredReasons {
		m.notStored[r] = cacheWritesDroppedFamily.NewCounter(set, "reason", r)
	}
	// Only the outcomes that can happen have a series: a dashboard or an
	// alert never sees pairs such as hit_exact with temperature.
	for _, o := range cacheOutcomes {
		if o.result != resultNone {
			m.requests[o.result][o.reason] = set.NewCounter(cacheRequestsSeries(o))
		}
	}
	for _, op := range cacheErrOps {
		m.errs[op] = cacheErrorsFamily.NewCounter(set, "op", op)
	}
	for _, g := range cache.GuardReasons {
		m.guards[g] = cacheGuardRejectionsFamily.NewCounter(set, "guard", g)
	}
	m.similarity = cacheSimilarityFamily.NewHistogram(set,
		[]float64{0.5, 0.6, 0.7, 0.8, 0.85, 0.88, 0.9, 0.91, 0.92, 0.93, 0.94, 0.95, 0.96, 0.97, 0.98, 0.99, 1})
	m.tokensSaved = cacheTokensSavedFamily.NewCounter(set)
	m.longQueries = cacheSemanticSkippedFamily.NewCounter(set, "reason", "query_too_long")
	cacheEntriesFamily.NewGauge(set, func() float64 { return float64(m.entries.Load()) })
	cacheVectorEntriesFamily.NewGauge(set, func() float64 { return float64(m.vectors.Load()) })
	cacheBytesFamily.NewGauge(set, func() float64 { return float64(m.bytes.Load()) })
	return m
}

// requestCounter is the series of a cache outcome; one missing from
// cacheOutcomes is made on first use, and counted all the same
// (TestCacheRequestSeriesCanHappen fails on it).
func (m *cacheMetrics) requestCounter(o cacheOutcome) *metrics.Counter {
	if c := m.requests[o.result][o.reason]; c != nil {
		return c
	}
	return m.set.GetOrCreateCounter(cacheRequestsSeries(o))
}

func cacheRequestsSeries(o cacheOutcome) string {
	return cacheRequestsFamily.Series("result", o.result.label(), "reason", o.reason.label())
}

// embeddingMetrics count inputs, each a hit or a miss, and the nodes'
// answers that are no embeddings answer for the inputs sent.
type embeddingMetrics struct {
	hits, misses *metrics.Counter
	badAnswers   *metrics.Counter
}

func newEmbeddingMetrics(set *metrics.Set) *embeddingMetrics {
	return &embeddingMetrics{
		hits:       cacheEmbeddingInputsFamily.NewCounter(set, "result", "hit"),
		misses:     cacheEmbeddingInputsFamily.NewCounter(set, "result", "miss"),
		badAnswers: badAnswersFamily.NewCounter(set, "reason", badEmbeddingsReason),
	}
}

// cacheObserverMetrics are cacheObserver's series.
type cacheObserverMetrics struct {
	look map[string]*metrics.PrometheusHistogram
	// writes: stored entries, failed entries
	stored, failed *metrics.Counter
	dropped        map[string]*metrics.Counter
	transitions    map[string]*metrics.Counter // path + ":" + to
	skipped        *metrics.Counter            // semantic lookups skipped for the embedder; nil without one
}

// lookupBuckets resolve the 0.1–10 ms range that a store on the same network
// answers in, and the timeouts above it.
var lookupBuckets = []float64{0.0001, 0.0002, 0.0003, 0.0005, 0.00075, 0.001, 0.0015, 0.002, 0.003, 0.005, 0.0075, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1}

func newCacheObserverMetrics(set *metrics.Set, embedder bool) cacheObserverMetrics {
	m := cacheObserverMetrics{look: map[string]*metrics.PrometheusHistogram{},
		dropped: map[string]*metrics.Counter{}, transitions: map[string]*metrics.Counter{}}
	if embedder {
		m.skipped = cacheEmbedSkippedFamily.NewCounter(set)
	}
	for _, op := range []string{"get", "search"} {
		m.look[op] = cacheLookupFamily.NewHistogram(set, lookupBuckets, "op", op)
	}
	m.stored = cacheWritesFamily.NewCounter(set, "result", "stored")
	m.failed = cacheWritesFamily.NewCounter(set, "result", "failed")
	for _, r := range []string{cache.DropQueueFull, cache.DropBreakerOpen, cache.DropShutdown} {
		m.dropped[r] = cacheWritesDroppedFamily.NewCounter(set, "reason", r)
	}
	for _, path := range []string{"read", "write"} {
		for _, to := range []cache.BreakerState{cache.BreakerOpen, cache.BreakerHalfOpen, cache.BreakerClosed} {
			m.transitions[path+":"+to.String()] = cacheBreakerTransitionsFamily.NewCounter(set, "path", path, "to", to.String())
		}
	}
	return m
}

// newIndexSyncErrors makes frontdoor_cache_index_sync_errors_total (an
// in-process index synced with Redis).
func newIndexSyncErrors(set *metrics.Set) *metrics.Counter {
	return cacheIndexSyncErrorsFamily.NewCounter(set)
}

// registerBackendGauges makes the gauges that read the cache backend's
// health (and the embedder's, when there is one) at every scrape.
func (g *Gateway) registerBackendGauges(set *metrics.Set) {
	if g.embedder != nil {
		cacheEmbedderUpFamily.NewGauge(set, func() float64 {
			if g.backend.EmbedderHealth().State == "ok" {
				return 1
			}
			return 0
		})
	}
	cacheBackendUpFamily.NewGauge(set, func() float64 {
		if g.backend.Health().Up {
			return 1
		}
		return 0
	})
	for _, st := range []cache.BackendState{cache.StateOK, cache.StateDegraded, cache.StateBypassed} {
		cacheBackendStateFamily.NewGauge(set, func() float64 {
			if g.backend.Health().State == st {
				return 1
			}
			return 0
		}, "state", string(st))
	}
	cacheWriteQueueFamily.NewGauge(set, func() float64 { return float64(g.backend.Health().WriteQueue) })
}

// verifyMetrics are the verifier's series.
type verifyMetrics struct {
	verdict        map[[2]string]*metrics.Counter // kind, verdict
	dropped        *metrics.Counter
	promoted       *metrics.Counter
	promoteRefused map[string]*metrics.Counter // approved near-misses not promoted, by reason
	sharedErrs     *metrics.Counter
}

// newVerifyMetrics makes the verifier's series; falseHitRatio is read at
// every scrape.
func newVerifyMetrics(set *metrics.Set, falseHitRatio func() float64) verifyMetrics {
	m := verifyMetrics{verdict: map[[2]string]*metrics.Counter{}, promoteRefused: map[string]*metrics.Counter{}}
	for _, kind := range []string{"audit", "near_miss"} {
		for _, vd := range []string{"yes", "no", "unsure", "error"} {
			m.verdict[[2]string{kind, vd}] = verifyFamily.NewCounter(set, "kind", kind, "verdict", vd)
		}
	}
	m.dropped = verifyDroppedFamily.NewCounter(set)
	m.promoted = verifyPromotedFamily.NewCounter(set)
	for _, reason := range []string{promoteRefusedLookupOnly, promoteRefusedNotStored, cache.PromoteRefusedPerMinute,
		cache.PromoteRefusedMax, promoteRefusedUnavailable} {
		m.promoteRefused[reason] = verifyPromoteRefusedFamily.NewCounter(set, "reason", reason)
	}
	m.sharedErrs = cacheErrorsFamily.NewCounter(set, "op", "verify_shared")
	falseHitRatioFamily.NewGauge(set, falseHitRatio)
	return m
}

// spillMetrics are the spillover's series.
type spillMetrics struct {
	set      *metrics.Set
	counters map[string]*metrics.Counter // reason|model, made on first use
	skipped  *metrics.Counter
}

// newSpillMetrics makes the spill-over's series; inflight, the gateway's,
// is read at every scrape.
func newSpillMetrics(set *metrics.Set, inflight *atomic.Int64) spillMetrics {
	m := spillMetrics{set: set, counters: map[string]*metrics.Counter{},
		skipped: spilloverSkippedFamily.GetOrCreateCounter(set, "reason", "endpoint")}
	spilloverInflightFamily.GetOrCreateGauge(set, func() float64 { return float64(inflight.Load()) })
	return m
}

// counter is the series of spilled requests for reason and model; the
// caller holds the spillover's mu.
func (m *spillMetrics) counter(reason, model string) *metrics.Counter {
	key := reason + "|" + model
	c := m.counters[key]
	if c == nil {
		c = spilloverFamily.GetOrCreateCounter(m.set, "reason", reason, "model", model)
		m.counters[key] = c
	}
	return c
}

// responseIDMetrics are responseIDs' series.
type responseIDMetrics struct {
	found, gone, unknown *metrics.Counter
	refusedState         map[stateRefusal]*metrics.Counter // frontdoor_responses_refused_total
}

// newResponseIDMetrics makes responseIDs' series; remembered is read at
// every scrape.
func newResponseIDMetrics(set *metrics.Set, remembered func() float64) responseIDMetrics {
	m := responseIDMetrics{refusedState: map[stateRefusal]*metrics.Counter{}}
	m.found = responsesByIDFamily.NewCounter(set, "result", "found")
	m.gone = responsesByIDFamily.NewCounter(set, "result", "holder_gone")
	m.unknown = responsesByIDFamily.NewCounter(set, "result", "unknown")
	for _, k := range refusedStates {
		m.refusedState[k] = responsesRefusedFamily.NewCounter(set, "field", k.field, "reason", k.reason)
	}
	responsesRememberedFamily.NewGauge(set, remembered)
	return m
}

// newSharedIDErrors makes frontdoor_responses_shared_errors_total, by op.
func newSharedIDErrors(set *metrics.Set) map[string]*metrics.Counter {
	errs := map[string]*metrics.Counter{}
	for _, op := range []string{"put", "get", "del"} {
		errs[op] = responsesSharedErrorsFamily.NewCounter(set, "op", op)
	}
	return errs
}
