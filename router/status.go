package router

import (
	"time"

	"frontdoor/internal/buildinfo"
	"frontdoor/router/admin"
)

var startTime = time.Now()

// Status is the /status document.
func (o operator) Status() admin.Status {
	g := o.g
	st := admin.Status{Uptime: time.Since(startTime).Round(time.Second).String(), Ready: g.pool.Ready() && !g.stopping.Load() && !g.draining.Load(),
		Draining: g.draining.Load() || g.stopping.Load(),
		Streams:  g.metrics.streams.Load(), Requests: g.metrics.classes()}
	st.Nodes = g.pool.Status()
	if g.conf().Balancer.Weights.Prefix > 0 {
		ss := g.pool.Sessions()
		st.Sessions = &ss
	}
	bi := buildinfo.Get()
	st.Version, st.Revision = bi.Version, bi.Revision
	st.TTFT.P50, st.TTFT.P95, st.TTFT.Samples = g.metrics.ttft.quantiles(time.Now().Add(-time.Minute))
	st.Outcomes = map[string]int64{"hit": 0, "local": g.metrics.upstreamAnswers.Load(), "spilled": 0, "rejected": g.metrics.rejected.Load()}
	if g.cache.On() {
		r, _ := g.cache.Totals()
		st.Outcomes["hit"] = r["hit_exact"] + r["hit_semantic"]
	}
	if sp := g.rt.Load().spill; sp != nil {
		st.Outcomes["spilled"] = sp.spilled.Load()
	}
	st.Cache = g.cache.Status()
	if s := g.rt.Load().spill; s != nil {
		spilled := s.spilled.Load()
		ss := &admin.SpillStatus{Upstream: s.name, Inflight: s.inflight.Load(), Spilled: spilled,
			MaxPredictedTTFT: g.conf().Spillover.MaxPredictedTTFT.D().Seconds()}
		var last time.Time
		ss.ByReason, last = s.reasons()
		if !last.IsZero() {
			last = last.UTC()
			ss.LastPredictedSLO = &last
		}
		if answered := g.metrics.upstreamAnswers.Load() + spilled; answered > 0 {
			ss.Ratio = float64(spilled) / float64(answered)
		}
		st.Spill = ss
	}
	st.Admission = g.adm.Status()
	pb := g.bodies.budget.Status()
	st.Admission.ParseBudget = &pb
	st.Discovery = g.pool.Discovery()
	st.Reload = g.reload.status()
	for _, w := range g.warms.List() {
		w.Failures = nil
		st.Warm = append(st.Warm, w)
	}
	st.Tracing = g.tracer.Status()
	return st
}
