package router

import (
	"math"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"frontdoor/adapters"
	"frontdoor/router/admin"
	"frontdoor/router/reuse"
)

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
