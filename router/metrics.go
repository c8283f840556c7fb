package router

import (
	"log/slog"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/valyala/fasthttp"

	"frontdoor/adapters"
	"frontdoor/admission"
	"frontdoor/internal/telemetry"
	"frontdoor/router/admin"
	"frontdoor/router/reuse"
)

// Every metric family of the router is declared here, once, beside its
// help text, and every series of them is made here, into the fields of
// the struct of the stage that counts it (gatewayMetrics, bodyRefusals,
// transportRefusals, passthroughCounters, reloader, responseIDs,
// sharedIDs, spillover, and the gauges that read the gateway's live
// state). The stages only count. The cache side's families are declared
// in router/reuse/metrics.go; other packages' in their own (admission,
// balancer, internal/telemetry).

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
var badAnswerReasons = []string{"too_large", "malformed", "sse_converted", badEmbeddingsReason}

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

// The dashboard's counters (admin.Counters): what /status does not keep,
// counted where the request ends.

// tenantStat is one tenant's counts since start.
type tenantStat struct {
	requests, errors5xx, rejected, hits, lookups, saved atomic.Int64
}

// dashCounts are the gateway-wide counts the dashboard's history reads.
type dashCounts struct {
	errors5xx                                atomic.Int64 // 5xx answers but 503 (no capacity: rejected)
	nodeTokens, spillPrompt, spillCompletion atomic.Int64
	tenants                                  atomic.Pointer[map[string]*tenantStat]
	latency                                  latencyRing
}

// setTenants keeps a stat per configured tenant (and the default), the
// counts of a tenant kept across reloads.
func (d *dashCounts) setTenants(names []string) {
	old := map[string]*tenantStat{}
	if p := d.tenants.Load(); p != nil {
		old = *p
	}
	next := make(map[string]*tenantStat, len(names))
	for _, n := range names {
		if s := old[n]; s != nil {
			next[n] = s
		} else {
			next[n] = &tenantStat{}
		}
	}
	d.tenants.Store(&next)
}

func (d *dashCounts) tenant(name string) *tenantStat {
	if p := d.tenants.Load(); p != nil {
		return (*p)[name]
	}
	return nil
}

// observe counts a finished request for its tenant; it ended at now,
// took after it started.
func (d *dashCounts) observe(x *exchange, now time.Time, took time.Duration) {
	d.latency.add(now, took)
	if x.status >= 500 && x.status != 503 {
		d.errors5xx.Add(1)
	}
	if x.tenant == nil {
		return
	}
	s := d.tenant(x.tenant.name)
	if s == nil {
		return
	}
	s.requests.Add(1)
	switch {
	case x.status == 429 || x.status == 503:
		s.rejected.Add(1)
	case x.status >= 500:
		s.errors5xx.Add(1)
	}
	switch x.cache.Result {
	case reuse.ResultHitExact, reuse.ResultHitSemantic:
		s.hits.Add(1)
		s.lookups.Add(1)
	case reuse.ResultMiss:
		s.lookups.Add(1)
	}
}

// saved counts tokens a tenant got from the cache.
func (d *dashCounts) saved(tenant string, tokens int) {
	s := d.tenant(tenant)
	if s == nil {
		s = d.tenant(DefaultTenant)
	}
	if s != nil {
		s.saved.Add(int64(tokens))
	}
}

// upstream counts an upstream answer's tokens: the hosted API's apart, for
// its price, the nodes' for their measured throughput.
func (d *dashCounts) upstream(name string, u adapters.Usage) {
	if strings.HasPrefix(name, "spillover:") {
		d.spillPrompt.Add(int64(u.PromptTokens))
		d.spillCompletion.Add(int64(u.CompletionTokens))
		return
	}
	d.nodeTokens.Add(int64(u.TotalTokens))
}

// latencyRing keeps the latest requests' latencies without a lock: a torn
// sample (a time with another's value) is harmless to a quantile.
type latencyRing struct {
	next atomic.Uint64
	at   [2048]atomic.Int64  // unix nanos
	v    [2048]atomic.Uint64 // float64 bits, seconds
}

func (r *latencyRing) add(now time.Time, d time.Duration) {
	i := (r.next.Add(1) - 1) % uint64(len(r.at))
	r.v[i].Store(math.Float64bits(d.Seconds()))
	r.at[i].Store(now.UnixNano())
}

// quantiles returns the p50 and p99 of the samples newer than since.
func (r *latencyRing) quantiles(since time.Time) (p50, p99 float64) {
	s := since.UnixNano()
	vals := make([]float64, 0, 256)
	for i := range r.at {
		if r.at[i].Load() > s {
			vals = append(vals, math.Float64frombits(r.v[i].Load()))
		}
	}
	if len(vals) == 0 {
		return 0, 0
	}
	slices.Sort(vals)
	q := func(p float64) float64 { return vals[min(len(vals)-1, int(p*float64(len(vals))))] }
	return q(0.5), q(0.99)
}

// Counters is admin.Gateway's: the gateway's counts since start.
func (o operator) Counters(since time.Time) admin.Counters {
	g := o.g
	m := g.metrics
	d := &m.dash
	c := admin.Counters{Errors5xx: d.errors5xx.Load(), Rejected: m.rejected.Load(),
		Local: m.upstreamAnswers.Load(), NodeTokens: d.nodeTokens.Load(),
		SpillPromptTokens: d.spillPrompt.Load(), SpillCompletionTokens: d.spillCompletion.Load(), FalseHit: math.NaN()}
	c.Requests = m.classes2xx.Load() + m.classes4xx.Load() + m.classes5xx.Load()
	for _, r := range m.retries {
		c.Retries += int64(r.Get())
	}
	if g.cache.On() {
		r, saved := g.cache.Totals()
		c.HitExact, c.HitSemantic, c.Miss = r["hit_exact"], r["hit_semantic"], r["miss"]
		c.TokensSaved = int64(saved)
		if v := g.cache.VerifyStatus(); v != nil && v.FalseHitRate.Samples > 0 {
			c.FalseHit = v.FalseHitRate.Estimate
		}
	}
	rt := g.rt.Load()
	if sp := rt.spill; sp != nil {
		c.Spilled = sp.spilled.Load()
	}
	p := rt.cfg.Spillover.Price
	c.Price = admin.Price{InputPerMillion: p.InputPerMillion, OutputPerMillion: p.OutputPerMillion, Currency: p.Currency}
	c.LatencyP50, c.LatencyP99 = d.latency.quantiles(since)
	c.TTFTP50, c.TTFTP95, _ = m.ttft.quantiles(time.Now().Add(-time.Minute))
	c.Tenants = map[string]admin.TenantCounters{}
	if ts := d.tenants.Load(); ts != nil {
		for name, s := range *ts {
			c.Tenants[name] = admin.TenantCounters{Requests: s.requests.Load(), Errors5xx: s.errors5xx.Load(), Rejected: s.rejected.Load(),
				Hits: s.hits.Load(), Lookups: s.lookups.Load(), TokensSaved: s.saved.Load()}
		}
	}
	return c
}
