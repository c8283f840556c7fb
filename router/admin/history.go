package admin

import (
	"cmp"
	"context"
	"encoding/json"
	"math"
	"slices"
	"strconv"
	"sync"
	"time"
)

// Counters is what the gateway has counted since it started, read at one
// moment: History differences two readings into one point.
type Counters struct {
	Requests    int64 // inference requests answered
	Errors5xx   int64 // of them, answered with a 5xx
	Rejected    int64 // answered 429 or 503: no quota or no capacity
	HitExact    int64
	HitSemantic int64
	Miss        int64
	Local       int64 // answers from the nodes
	Spilled     int64 // answers from the hosted API
	Retries     int64 // attempts retried on another node
	TokensSaved int64 // tokens the cache answered (prompt and completion)
	NodeTokens  int64 // tokens the nodes answered (prompt and completion)
	// SpillPromptTokens and SpillCompletionTokens are the hosted API's.
	SpillPromptTokens, SpillCompletionTokens int64
	// Latency is over the requests answered since the reading asked for:
	// arrival to the end of the handler (streams: to the start of the
	// stream), seconds; TTFT over the last minute's streamed answers.
	LatencyP50, LatencyP99, TTFTP50, TTFTP95 float64
	// FalseHit is the judged false-hit rate; NaN when no judge audits.
	FalseHit float64
	Tenants  map[string]TenantCounters
	Price    Price // the spill-over's price; zero when none is configured
}

// TenantCounters is one tenant's share of Counters.
type TenantCounters struct {
	Requests    int64
	Errors5xx   int64
	Rejected    int64
	Hits        int64 // exact and semantic
	Lookups     int64 // hits and misses
	TokensSaved int64
}

// Price is the hosted API's price per million tokens (spillover.price).
type Price struct {
	InputPerMillion  float64 `json:"input_per_million"`
	OutputPerMillion float64 `json:"output_per_million"`
	Currency         string  `json:"currency"`
}

// Cost is the price of prompt and completion tokens.
func (p Price) Cost(prompt, completion int64) float64 {
	return (float64(prompt)*p.InputPerMillion + float64(completion)*p.OutputPerMillion) / 1e6
}

// Set reports whether a price is configured.
func (p Price) Set() bool { return p.InputPerMillion > 0 || p.OutputPerMillion > 0 }

// point is one step of the history; rates are per second, shares 0..1.
type point struct {
	t                                  int64 // unix seconds at the step's end
	rps, hit, local, spilled, rejected float64
	exact, semantic                    float64 // shares of the lookups
	err5xx, retry, nodeFail            float64 // shares of the requests
	spillShare                         float64 // of the answers from upstream
	saved                              float64 // tokens/s
	nodeTokens, busy                   float64 // tokens and busy node-seconds in the step
	gpuSaved                           float64 // GPU-seconds saved in the step
	spillCost                          float64 // in the step, at Price
	load                               float64 // in flight / capacity of the nodes
	latP50, latP99, ttftP50, ttftP95   float64 // milliseconds
	falseHit                           float64 // NaN: no judge
}

// series are the history's columns, in the order the JSON lists them.
var series = []struct {
	name string
	get  func(p *point) float64
}{
	{"rps", func(p *point) float64 { return p.rps }},
	{"hit_rps", func(p *point) float64 { return p.hit }},
	{"local_rps", func(p *point) float64 { return p.local }},
	{"spilled_rps", func(p *point) float64 { return p.spilled }},
	{"rejected_rps", func(p *point) float64 { return p.rejected }},
	{"hit_exact", func(p *point) float64 { return p.exact }},
	{"hit_semantic", func(p *point) float64 { return p.semantic }},
	{"err_5xx", func(p *point) float64 { return p.err5xx }},
	{"retries", func(p *point) float64 { return p.retry }},
	{"node_failures", func(p *point) float64 { return p.nodeFail }},
	{"spill_share", func(p *point) float64 { return p.spillShare }},
	{"tokens_saved", func(p *point) float64 { return p.saved }},
	{"gpu_seconds_saved", func(p *point) float64 { return p.gpuSaved }},
	{"node_tokens_per_busy_second", func(p *point) float64 {
		if p.busy <= 0 {
			return math.NaN()
		}
		return p.nodeTokens / p.busy
	}},
	{"spill_cost", func(p *point) float64 { return p.spillCost }},
	{"load", func(p *point) float64 { return p.load }},
	{"latency_p50_ms", func(p *point) float64 { return p.latP50 }},
	{"latency_p99_ms", func(p *point) float64 { return p.latP99 }},
	{"ttft_p50_ms", func(p *point) float64 { return p.ttftP50 }},
	{"ttft_p95_ms", func(p *point) float64 { return p.ttftP95 }},
	{"false_hit", func(p *point) float64 { return p.falseHit }},
}

// History is the dashboard's memory: the last hour of the gateway's
// counters at Step's resolution, in a ring, sampled by Run.
type History struct {
	Step   time.Duration
	Window time.Duration

	mu      sync.Mutex
	points  []point // ring
	next    int
	full    bool
	prev    Counters
	prevAt  time.Time
	prevF   int64   // node failures at prev
	busy    float64 // busy node-seconds since prev
	tenants []tenantMark
	price   Price
}

// tenantMark is the tenants' counters at a moment; the table is now less
// the oldest mark within the window.
type tenantMark struct {
	at time.Time
	c  map[string]TenantCounters
}

// NewHistory keeps window at step's resolution.
func NewHistory(step, window time.Duration) *History {
	n := max(1, int(window/step))
	return &History{Step: step, Window: window, points: make([]point, n)}
}

// Run samples gw until ctx ends: the nodes' in-flight counts five times a
// step (a node with a request in flight is busy), the counters once a step.
func (h *History) Run(ctx context.Context, gw Gateway) {
	sub := h.Step / 5
	t := time.NewTicker(sub)
	defer t.Stop()
	h.start(gw, time.Now())
	last := time.Now()
	for i := 1; ; i++ {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			h.sampleBusy(gw, now.Sub(last).Seconds())
			last = now
			if i%5 == 0 {
				h.record(gw, now)
			}
		}
	}
}

func (h *History) start(gw Gateway, now time.Time) {
	c := gw.Counters(now)
	h.mu.Lock()
	defer h.mu.Unlock()
	h.prev, h.prevAt, h.prevF = c, now, nodeFailures(gw)
	h.tenants = []tenantMark{{now, c.Tenants}}
	h.price = c.Price
}

// sampleBusy adds dt seconds for each node with a request in flight.
func (h *History) sampleBusy(gw Gateway, dt float64) {
	busy := 0
	for _, n := range gw.Pool().Nodes() {
		if n.Inflight() > 0 {
			busy++
		}
	}
	h.mu.Lock()
	h.busy += float64(busy) * dt
	h.mu.Unlock()
}

// nodeFailures sums the failed attempts the pool counts, over the nodes
// in service and those being retired.
func nodeFailures(gw Gateway) int64 {
	var f int64
	for _, n := range gw.Pool().Status() {
		f += int64(n.Requests["failure"])
	}
	return f
}

// record closes the step ending at now.
func (h *History) record(gw Gateway, now time.Time) {
	h.mu.Lock()
	since := h.prevAt
	h.mu.Unlock()
	c := gw.Counters(since)
	fails := nodeFailures(gw)
	var inflight, capacity int64
	for _, n := range gw.Pool().Nodes() {
		inflight += n.Inflight()
		capacity += int64(n.Config().MaxConcurrency)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	p, d := c, func(a, b int64) float64 { return float64(max(0, b-a)) }
	dt := math.Max(now.Sub(h.prevAt).Seconds(), 1e-3)
	q := h.prev
	pt := point{t: now.Unix(), falseHit: p.FalseHit,
		latP50: 1000 * p.LatencyP50, latP99: 1000 * p.LatencyP99, ttftP50: 1000 * p.TTFTP50, ttftP95: 1000 * p.TTFTP95}
	reqs := d(q.Requests, p.Requests)
	pt.rps = reqs / dt
	hits := d(q.HitExact, p.HitExact) + d(q.HitSemantic, p.HitSemantic)
	pt.hit = hits / dt
	pt.local, pt.spilled, pt.rejected = d(q.Local, p.Local)/dt, d(q.Spilled, p.Spilled)/dt, d(q.Rejected, p.Rejected)/dt
	share := func(a, b float64) float64 {
		if b <= 0 {
			return 0
		}
		return a / b
	}
	looked := hits + d(q.Miss, p.Miss)
	pt.exact, pt.semantic = share(d(q.HitExact, p.HitExact), looked), share(d(q.HitSemantic, p.HitSemantic), looked)
	pt.err5xx, pt.retry, pt.nodeFail = share(d(q.Errors5xx, p.Errors5xx), reqs), share(d(q.Retries, p.Retries), reqs), share(d(h.prevF, fails), reqs)
	pt.spillShare = share(d(q.Spilled, p.Spilled), d(q.Local, p.Local)+d(q.Spilled, p.Spilled))
	saved := d(q.TokensSaved, p.TokensSaved)
	pt.saved = saved / dt
	pt.nodeTokens, pt.busy = d(q.NodeTokens, p.NodeTokens), h.busy
	if capacity > 0 {
		pt.load = float64(inflight) / float64(capacity)
	}
	pt.spillCost = p.Price.Cost(max(0, p.SpillPromptTokens-q.SpillPromptTokens), max(0, p.SpillCompletionTokens-q.SpillCompletionTokens))
	h.points[h.next] = pt
	h.next = (h.next + 1) % len(h.points)
	h.full = h.full || h.next == 0
	if tps := h.throughputLocked(); tps > 0 {
		h.points[(h.next+len(h.points)-1)%len(h.points)].gpuSaved = saved / tps
	}
	h.prev, h.prevAt, h.prevF, h.busy, h.price = c, now, fails, 0, c.Price
	h.markTenantsLocked(now, c.Tenants)
}

// throughputLocked is the nodes' measured throughput over the window:
// tokens answered per busy node-second; 0 while unknown.
func (h *History) throughputLocked() float64 {
	var tokens, busy float64
	for _, p := range h.pointsLocked() {
		tokens += p.nodeTokens
		busy += p.busy
	}
	if busy <= 0 || tokens <= 0 {
		return 0
	}
	return tokens / busy
}

// markTenantsLocked keeps a mark of the tenants' counters a minute (or a
// step, if longer) apart, the oldest within the window.
func (h *History) markTenantsLocked(now time.Time, c map[string]TenantCounters) {
	every := max(time.Minute, h.Step)
	if last := h.tenants[len(h.tenants)-1]; now.Sub(last.at) >= every {
		h.tenants = append(h.tenants, tenantMark{now, c})
	}
	for len(h.tenants) > 1 && now.Sub(h.tenants[1].at) >= h.Window {
		h.tenants = h.tenants[1:]
	}
}

func (h *History) pointsLocked() []point {
	if !h.full {
		return h.points[:h.next]
	}
	return append(slices.Clone(h.points[h.next:]), h.points[:h.next]...)
}

// TenantRow is one tenant's line of the dashboard, over the window (or
// since start when the gateway is younger).
type TenantRow struct {
	Name            string  `json:"name"`
	Requests        int64   `json:"requests"`
	HitRate         float64 `json:"hit_rate"`
	TokensSaved     int64   `json:"tokens_saved"`
	GPUSecondsSaved float64 `json:"gpu_seconds_saved"`
	Errors5xx       int64   `json:"errors_5xx"`
	Rejected        int64   `json:"rejected"`
}

// AppendJSON appends the history after the unix second after as JSON:
// {"step_seconds", "window_seconds", "throughput", "price", "tenants",
// "t": [...], "series": {name: [...]}}, null where a value is unknown.
func (h *History) AppendJSON(b []byte, after int64) []byte {
	h.mu.Lock()
	pts := h.pointsLocked()
	tps := h.throughputLocked()
	rows, windowSec := h.tenantRowsLocked(tps)
	price := h.price
	h.mu.Unlock()
	i := 0
	for i < len(pts) && pts[i].t <= after {
		i++
	}
	pts = pts[i:]
	b = append(b, `{"step_seconds":`...)
	b = strconv.AppendFloat(b, h.Step.Seconds(), 'g', -1, 64)
	b = append(b, `,"window_seconds":`...)
	b = strconv.AppendFloat(b, h.Window.Seconds(), 'g', -1, 64)
	b = append(b, `,"tenant_window_seconds":`...)
	b = strconv.AppendFloat(b, windowSec, 'f', 0, 64)
	b = append(b, `,"throughput":`...)
	b = appendNum(b, tps)
	b = append(b, `,"price":`...)
	b = appendJSON(b, price)
	b = append(b, `,"tenants":`...)
	b = appendJSON(b, rows)
	b = append(b, `,"t":[`...)
	for k, p := range pts {
		if k > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendInt(b, p.t, 10)
	}
	b = append(b, `],"series":{`...)
	for k, s := range series {
		if k > 0 {
			b = append(b, ',')
		}
		b = append(append(append(b, '"'), s.name...), `":[`...)
		for j := range pts {
			if j > 0 {
				b = append(b, ',')
			}
			b = appendNum(b, s.get(&pts[j]))
		}
		b = append(b, ']')
	}
	return append(b, "}}"...)
}

func (h *History) tenantRowsLocked(tps float64) ([]TenantRow, float64) {
	if len(h.tenants) == 0 {
		return []TenantRow{}, 0
	}
	old, now := h.tenants[0], h.prev.Tenants
	rows := []TenantRow{}
	for name, c := range now {
		o := old.c[name]
		r := TenantRow{Name: name, Requests: c.Requests - o.Requests, TokensSaved: c.TokensSaved - o.TokensSaved,
			Errors5xx: c.Errors5xx - o.Errors5xx, Rejected: c.Rejected - o.Rejected}
		if l := c.Lookups - o.Lookups; l > 0 {
			r.HitRate = float64(c.Hits-o.Hits) / float64(l)
		}
		if tps > 0 {
			r.GPUSecondsSaved = float64(r.TokensSaved) / tps
		}
		rows = append(rows, r)
	}
	slices.SortFunc(rows, func(a, b TenantRow) int {
		if c := cmp.Compare(b.Requests, a.Requests); c != 0 {
			return c
		}
		return cmp.Compare(a.Name, b.Name)
	})
	return rows, h.prevAt.Sub(old.at).Seconds()
}

func appendJSON(b []byte, v any) []byte {
	j, err := json.Marshal(v)
	if err != nil {
		return append(b, "null"...)
	}
	return append(b, j...)
}

// appendNum appends v with at most 4 significant decimals, null for NaN
// and the infinities.
func appendNum(b []byte, v float64) []byte {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return append(b, "null"...)
	}
	if v == math.Trunc(v) && math.Abs(v) < 1e15 {
		return strconv.AppendInt(b, int64(v), 10)
	}
	return strconv.AppendFloat(b, v, 'g', 5, 64)
}
