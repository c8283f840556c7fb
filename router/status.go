package router

import (
	_ "embed"
	"time"

	"github.com/valyala/fasthttp"

	"frontdoor/balancer"
	"frontdoor/cache"
	"frontdoor/router/admission"
)

//go:embed dashboard.html
var dashboardHTML []byte

var startTime = time.Now()

// Status is the GET /status document.
type Status struct {
	Uptime    string                `json:"uptime"`
	Ready     bool                  `json:"ready"`
	Requests  map[string]int        `json:"requests"` // by outcome class
	Streams   int64                 `json:"streams_active"`
	Cache     *CacheStatus          `json:"cache,omitempty"`
	Spill     *SpillStatus          `json:"spillover,omitempty"`
	Nodes     []balancer.NodeStatus `json:"nodes"`
	Admission admission.Status      `json:"admission"`
	// Discovery lists the discover: dns entries: addresses found, and the
	// last lookup's error while lookups fail.
	Discovery []balancer.DiscoveryStatus `json:"discovery,omitempty"`
	Reload    *ReloadStatus              `json:"last_reload,omitempty"`
	Draining  bool                       `json:"draining"`       // shutting down: /readyz says 503
	Warm      []WarmStatus               `json:"warm,omitempty"` // warm-ups, running and recent (failures left out)
}

// CacheStatus is the cache part of /status.
type CacheStatus struct {
	Backend  string           `json:"backend"`
	Results  map[string]int64 `json:"results"`
	HitRatio float64          `json:"hit_ratio"`
	Entries  int64            `json:"entries"`
	Vectors  int64            `json:"vector_entries"`
	Bytes    int64            `json:"bytes"`
	Saved    uint64           `json:"tokens_saved"`
	// The store's health: state (ok, degraded, bypassed) and since when, up,
	// why, both breakers and the write-back queue.
	cache.Health
	Dropped uint64 `json:"writes_dropped"`
}

// SpillStatus is the spill-over part of /status.
type SpillStatus struct {
	Upstream string  `json:"upstream"`
	Inflight int64   `json:"inflight"`
	Spilled  int64   `json:"spilled"`
	Ratio    float64 `json:"ratio"` // spilled / upstream answers
}

func (g *Gateway) status() Status {
	st := Status{Uptime: time.Since(startTime).Round(time.Second).String(), Ready: g.pool.Ready() && !g.stopping.Load() && !g.draining.Load(),
		Draining: g.draining.Load() || g.stopping.Load(),
		Streams:  g.metrics.streams.Load(), Requests: g.metrics.classes()}
	st.Nodes = g.pool.Status()
	if g.store != nil {
		st.Cache = &CacheStatus{Backend: g.conf().Cache.Backend, Results: g.cm.totals(), HitRatio: g.cm.hitRatio(),
			Entries: g.cm.entries.Load(), Vectors: g.cm.vectors.Load(), Bytes: g.cm.bytes.Load(),
			Saved: g.cm.tokensSaved.Get(), Health: g.backend.Health(), Dropped: g.cm.dropped()}
	}
	if s := g.rt.Load().spill; s != nil {
		spilled := s.spilled.Load()
		ss := &SpillStatus{Upstream: s.name, Inflight: s.inflight.Load(), Spilled: spilled}
		if answered := g.metrics.upstreamAnswers.Load() + spilled; answered > 0 {
			ss.Ratio = float64(spilled) / float64(answered)
		}
		st.Spill = ss
	}
	st.Admission = g.adm.Status()
	st.Discovery = g.pool.Discovery()
	st.Reload = g.reload.status()
	for _, w := range g.warms.list() {
		w.Failures = nil
		st.Warm = append(st.Warm, w)
	}
	return st
}

func (g *Gateway) serveStatus(ctx *fasthttp.RequestCtx) {
	if !g.rt.Load().admin.allow(ctx, g.writeError) || !g.onlyMethod(ctx, fasthttp.MethodGet) {
		return
	}
	writeJSON(ctx, 200, g.status())
}

func (g *Gateway) serveDashboard(ctx *fasthttp.RequestCtx) {
	if !g.rt.Load().admin.allow(ctx, g.writeError) || !g.onlyMethod(ctx, fasthttp.MethodGet) {
		return
	}
	ctx.SetContentType("text/html; charset=utf-8")
	ctx.SetBody(dashboardHTML)
}
