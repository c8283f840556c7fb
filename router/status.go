package router

import (
	_ "embed"
	"time"

	"github.com/valyala/fasthttp"

	"frontdoor/balancer"
	"frontdoor/cache"
	"frontdoor/internal/buildinfo"
	"frontdoor/router/admission"
)

//go:embed dashboard.html
var dashboardHTML []byte

var startTime = time.Now()

// Status is the GET /status document.
type Status struct {
	Uptime   string         `json:"uptime"`
	Ready    bool           `json:"ready"`
	Version  string         `json:"version"`
	Revision string         `json:"revision,omitempty"`
	Requests map[string]int `json:"requests"` // by outcome class
	// Outcomes counts answers since start: hit (from the cache), local (a
	// node), spilled (the hosted API), rejected (429 or 503).
	Outcomes map[string]int64 `json:"outcomes"`
	// TTFT is over the streamed answers of local nodes in the last minute.
	TTFT      TTFTStatus            `json:"ttft"`
	Streams   int64                 `json:"streams_active"`
	Cache     *CacheStatus          `json:"cache,omitempty"`
	Spill     *SpillStatus          `json:"spillover,omitempty"`
	Nodes     []balancer.NodeStatus `json:"nodes"`
	Admission admission.Status      `json:"admission"`
	Warm      []WarmStatus          `json:"warm,omitempty"` // warm-ups, running and recent (failures left out)
}

// TTFTStatus is the time to first token of recent streamed answers.
type TTFTStatus struct {
	P50     float64 `json:"p50_seconds"`
	P95     float64 `json:"p95_seconds"`
	Samples int     `json:"samples"`
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
	Dropped  uint64          `json:"writes_dropped"`
	Embedder *EmbedderStatus `json:"embedder,omitempty"`
}

// SpillStatus is the spill-over part of /status.
type SpillStatus struct {
	Upstream string  `json:"upstream"`
	Inflight int64   `json:"inflight"`
	Spilled  int64   `json:"spilled"`
	Ratio    float64 `json:"ratio"` // spilled / upstream answers
}

func (g *Gateway) status() Status {
	st := Status{Uptime: time.Since(startTime).Round(time.Second).String(), Ready: g.pool.Ready() && !g.stopping.Load(),
		Streams: g.metrics.streams.Load(), Requests: g.metrics.classes()}
	st.Nodes = g.pool.Status()
	bi := buildinfo.Get()
	st.Version, st.Revision = bi.Version, bi.Revision
	st.TTFT.P50, st.TTFT.P95, st.TTFT.Samples = g.metrics.ttft.quantiles(time.Now().Add(-time.Minute))
	st.Outcomes = map[string]int64{"hit": 0, "local": g.metrics.upstreamAnswers.Load(), "spilled": 0, "rejected": g.metrics.rejected.Load()}
	if g.store != nil {
		r := g.cm.totals()
		st.Outcomes["hit"] = r["hit_exact"] + r["hit_semantic"]
	}
	if g.spill != nil {
		st.Outcomes["spilled"] = g.spill.spilled.Load()
	}
	if g.store != nil {
		st.Cache = &CacheStatus{Backend: g.cfg.Cache.Backend, Results: g.cm.totals(), HitRatio: g.cm.hitRatio(),
			Entries: g.cm.entries.Load(), Vectors: g.cm.vectors.Load(), Bytes: g.cm.bytes.Load(),
			Saved: g.cm.tokensSaved.Get(), Health: g.backend.Health(), Dropped: g.cm.dropped()}
		if g.embedWatch != nil {
			es := g.embedWatch.status()
			st.Cache.Embedder = &es
		}
	}
	if s := g.spill; s != nil {
		spilled := s.spilled.Load()
		ss := &SpillStatus{Upstream: s.name, Inflight: s.inflight.Load(), Spilled: spilled}
		if answered := g.metrics.upstreamAnswers.Load() + spilled; answered > 0 {
			ss.Ratio = float64(spilled) / float64(answered)
		}
		st.Spill = ss
	}
	st.Admission = g.adm.Status()
	for _, w := range g.warms.list() {
		w.Failures = nil
		st.Warm = append(st.Warm, w)
	}
	return st
}

func (g *Gateway) serveStatus(ctx *fasthttp.RequestCtx) {
	if !g.admin.allow(ctx, g.writeError) || !g.onlyMethod(ctx, fasthttp.MethodGet) {
		return
	}
	writeJSON(ctx, 200, g.status())
}

func (g *Gateway) serveDashboard(ctx *fasthttp.RequestCtx) {
	if !g.admin.allow(ctx, g.writeError) || !g.onlyMethod(ctx, fasthttp.MethodGet) {
		return
	}
	ctx.SetContentType("text/html; charset=utf-8")
	ctx.SetBody(dashboardHTML)
}
