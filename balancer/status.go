package balancer

import (
	"math"
	"time"
)

// Node states, most significant first: a node is reported in the first
// that applies.
const (
	StateDrained   = "drained"
	StateUnhealthy = "unhealthy"
	StateOpen      = "open"
	StateHalfOpen  = "half_open"
	StateEjected   = "ejected"
	StateHealthy   = "healthy"
	// StateRemoved is a node that left the node set (a reload or
	// discovery) and still has requests in flight.
	StateRemoved = "removed"
)

// States lists every node state.
var States = [...]string{StateHealthy, StateUnhealthy, StateEjected, StateOpen, StateHalfOpen, StateDrained, StateRemoved}

// NodeStatus is one node as the admin API shows it.
type NodeStatus struct {
	Name           string            `json:"name"`
	URL            string            `json:"url"` // user information masked: http://xxxxx@host
	Kind           string            `json:"kind"`
	Models         []string          `json:"models"`
	State          string            `json:"state"`
	Inflight       int64             `json:"inflight"`
	MaxConcurrency int               `json:"max_concurrency"`
	Weight         float64           `json:"weight"`
	Metrics        *MetricsStatus    `json:"metrics"` // null: never scraped (or kind openai)
	EWMATTFT       *float64          `json:"ewma_ttft_seconds"`
	EWMATPOT       *float64          `json:"ewma_tpot_seconds"`
	PrefixIndex    PrefixIndexStatus `json:"prefix_index"`
	Score          float64           `json:"score"`
	ScoreParts     ScoreParts        `json:"score_parts"`
	Predictor      PredictorStatus   `json:"ttft_predictor"`
	Breaker        BreakerStatus     `json:"breaker"`
	Ejection       EjectionStatus    `json:"ejection"`
	Requests       map[string]uint64 `json:"requests"` // by outcome
	ProbeError     string            `json:"probe_error,omitempty"`
	// ServedModels is what the node's engine lists (/v1/models, TGI's
	// /info) at the last probe; absent when it was not checked.
	ServedModels []string `json:"served_models,omitempty"`
	// ModelMismatch lists the configured models the engine does not
	// serve: the node gets no requests for them (but on TGI).
	ModelMismatch []ModelMismatch `json:"model_mismatch,omitempty"`
	DiscoveredBy  string          `json:"discovered_by,omitempty"` // the discover entry it came from
}

// MetricsStatus is the last scrape of a node's engine metrics. A null
// value was absent from it.
type MetricsStatus struct {
	Waiting *float64 `json:"waiting"`
	Running *float64 `json:"running"`
	KVUsage *float64 `json:"kv_usage"`
	// PrefixCacheHitRate is the engine's own prefix-cache hit rate
	// (tokens hit ÷ tokens queried) over the last scrape interval that
	// had queries; null if it publishes none.
	PrefixCacheHitRate *float64 `json:"prefix_cache_hit_rate"`
	AgeSeconds         float64  `json:"age_seconds"`
	Stale              bool     `json:"stale"` // older than stale_after: scored as unknown
	Error              string   `json:"error,omitempty"`
}

// PrefixIndexStatus is the prefix scorer's view of a node.
type PrefixIndexStatus struct {
	Blocks          int     `json:"blocks"`           // prefix hashes the node is presumed to hold (aged-out ones are dropped at each scrape)
	CapacityTokens  int64   `json:"capacity_tokens"`  // the node's KV capacity: published, else prefix.capacity_tokens
	EffectiveTokens int64   `json:"effective_tokens"` // the capacity blocks age out by: capacity_tokens × scale
	Scale           float64 `json:"scale"`            // the correction from the engine's measured prefix-cache hit rate
	// PredictedHitRate and MeasuredHitRate are the last comparison's: the
	// share of routed prompt tokens the index presumed held, and the
	// engine's hit rate over the same scrape interval (null: none yet).
	PredictedHitRate *float64 `json:"predicted_hit_rate"`
	MeasuredHitRate  *float64 `json:"measured_hit_rate"`
}

// BreakerStatus is the circuit breaker's state.
type BreakerStatus struct {
	State     string     `json:"state"` // closed | open | half_open
	OpenUntil *time.Time `json:"open_until,omitempty"`
	Opens     int        `json:"opens"`
}

// EjectionStatus is the overload ejection's state.
type EjectionStatus struct {
	Ejected bool       `json:"ejected"`
	Since   *time.Time `json:"since,omitempty"`
	Reason  string     `json:"reason,omitempty"`
	Count   int        `json:"count"`
}

// state returns the node's state name as of now.
func (n *Node) state(now int64) string {
	switch {
	case n.retired.Load():
		return StateRemoved
	case n.drained.Load():
		return StateDrained
	case !n.healthy.Load():
		return StateUnhealthy
	}
	switch n.breakerStateAt(now) {
	case breakerOpen:
		return StateOpen
	case breakerHalfOpen:
		return StateHalfOpen
	}
	if n.ejected.Load() {
		return StateEjected
	}
	return StateHealthy
}

// Status returns every node's state, in configuration order. Scores are
// computed as for a request without an affinity key, against the node's
// peers serving its first model.
func (p *Pool) Status() []NodeStatus {
	now := p.nowNanos()
	nodes := p.Nodes()
	p.mu.Lock()
	for n := range p.retiring {
		nodes = append(nodes, n)
	}
	p.mu.Unlock()
	out := make([]NodeStatus, 0, len(nodes))
	for _, n := range nodes {
		st := NodeStatus{
			Name: n.cfg.Name, URL: n.shownURL, Kind: n.cfg.Kind, Models: append([]string(nil), n.cfg.Models...),
			State: n.state(now), Inflight: n.inflight.Load(), MaxConcurrency: n.cfg.MaxConcurrency, Weight: n.cfg.Weight,
			Requests: map[string]uint64{}, DiscoveredBy: n.entry,
		}
		for o := range n.requests {
			st.Requests[Outcome(o).String()] = n.requests[o].Load()
		}
		st.PrefixIndex = n.prefix.status(p.capacityTokens(n))
		st.ScoreParts = p.nodeScore(n, now)
		st.Score = st.ScoreParts.Total
		st.Predictor = p.predictorStatus(n, now)
		if v, _, ok := n.ttft.get(); ok {
			st.EWMATTFT = &v
		}
		if v, _, ok := n.tpot.get(); ok {
			st.EWMATPOT = &v
		}
		n.mu.Lock()
		scrapeErr, probeErr := n.scrapeErr, n.probeErr
		br, ej := n.br, n.ej
		n.mu.Unlock()
		st.ProbeError = probeErr
		st.ServedModels, st.ModelMismatch = p.mismatches(n)
		if m := n.scraped.Load(); m != nil || scrapeErr != "" {
			ms := &MetricsStatus{Error: scrapeErr, Stale: true}
			if m != nil {
				ms.Waiting, ms.Running, ms.KVUsage = optional(m.waiting), optional(m.running), optional(m.kv)
				if r, ok := n.PrefixCacheHitRate(); ok {
					ms.PrefixCacheHitRate = &r
				}
				ms.AgeSeconds = time.Duration(now - m.at).Seconds()
				ms.Stale = now-m.at > int64(p.conf().StaleAfter)
			}
			st.Metrics = ms
		}
		bs := n.breakerStateAt(now)
		st.Breaker = BreakerStatus{State: breakerNames[bs], Opens: br.opens}
		if bs == breakerOpen {
			t := time.Unix(0, n.openUntil.Load()).UTC()
			st.Breaker.OpenUntil = &t
		}
		st.Ejection = EjectionStatus{Ejected: n.ejected.Load(), Reason: ej.reason, Count: ej.count}
		if st.Ejection.Ejected {
			t := time.Unix(0, ej.since).UTC()
			st.Ejection.Since = &t
		}
		out = append(out, st)
	}
	return out
}

// nodeScore is the node's score without an affinity key, with latency
// normalised against every node sharing its first model.
func (p *Pool) nodeScore(n *Node, now int64) ScoreParts {
	peers := p.set.Load().byModel[n.cfg.Models[0]]
	return p.score(n, now, factors{bestTTFT: p.bestTTFT(peers, now)})
}

func optional(v float64) *float64 {
	if math.IsNaN(v) {
		return nil
	}
	return &v
}
