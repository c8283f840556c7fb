package router

import (
	"frontdoor/adapters"
	"frontdoor/internal/telemetry"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/valyala/fasthttp"
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
		clientAborts: set.NewCounter(`frontdoor_client_aborts_total`),
		streamErrors: set.NewCounter(`frontdoor_stream_errors_total`),
		refused:      newTransportRefusals(set, g.log),
		badAnswers:   map[string]*metrics.Counter{},
	}
	for _, r := range badAnswerReasons {
		m.badAnswers[r] = set.NewCounter(`frontdoor_upstream_bad_answers_total{reason="` + r + `"}`)
	}
	for i, ep := range endpointLabel {
		m.durations[i] = set.NewPrometheusHistogram(`frontdoor_request_duration_seconds{endpoint="` + ep + `"}`)
	}
	for _, r := range retryReasons {
		m.retries[r] = set.NewCounter(`frontdoor_retries_total{reason="` + r + `"}`)
	}
	m.setTenants(g.conf().Tenants)
	set.NewGauge(`frontdoor_streams_active`, func() float64 { return float64(m.streams.Load()) })
	g.pool.RegisterMetrics(set)
	telemetry.RegisterBuildInfo(set)
	return m
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
	c := m.set.GetOrCreateCounter(`frontdoor_requests_total{endpoint="` + endpointLabel[ep] + `",code="` + strconv.Itoa(status) + `"}`)
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
