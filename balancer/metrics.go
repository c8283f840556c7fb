package balancer

import (
	"math"
	"slices"

	"github.com/VictoriaMetrics/metrics"

	"frontdoor/internal/telemetry"
)

// The families the balancer exposes: RegisterMetrics makes their series.
var (
	nodeInflightFamily = telemetry.NewFamily("frontdoor_node_inflight",
		"Requests in flight on a node.")
	nodeScoreFamily = telemetry.NewFamily("frontdoor_node_score",
		"The picker's score of a node (lower is better).")
	nodeStateFamily = telemetry.NewFamily("frontdoor_node_state",
		"1 for a node's current state (healthy, ejected, open, draining, ...).")
	nodeRequestsFamily = telemetry.NewFamily("frontdoor_node_requests_total",
		"Attempts on a node, by outcome (success, failure, canceled).")
	nodeTTFTFamily = telemetry.NewFamily("frontdoor_node_ttft_seconds",
		"Time to first token of streamed answers, by node.")
	nodePredictedTTFTFamily = telemetry.NewFamily("frontdoor_node_predicted_ttft_seconds",
		"The TTFT predictor's last known prediction for a node (NaN until it has enough observations).")
	nodeModelMismatchFamily = telemetry.NewFamily("frontdoor_node_model_mismatch",
		"1 while a node's engine does not list a model the node is configured with (its /v1/models, TGI's /info): the node gets no requests for that model (TGI, which ignores the name, still does); 0 otherwise.")
	predictionErrorFamily = telemetry.NewFamily("frontdoor_ttft_prediction_error_seconds",
		"Absolute error of the TTFT predictor, |predicted - measured|, over streamed answers with a known prediction.")
	sessionsFamily = telemetry.NewFamily("frontdoor_balancer_sessions_total",
		"Conversation turns routed by the prefix scorer: new (no node known), stayed (on the node of the previous turn), moved.")
	discoveryErrorsFamily = telemetry.NewFamily("frontdoor_discovery_errors_total",
		"Failed DNS lookups of a discover: dns node entry; the last known nodes are kept.")
	discoveryNodesFamily = telemetry.NewFamily("frontdoor_discovery_nodes",
		"Nodes a discover: dns entry currently resolves to.")
	discoveryDroppedFamily = telemetry.NewFamily("frontdoor_discovery_dropped_total",
		"Addresses a discover: dns lookup returned but did not make nodes, by reason (unspecified, multicast, self, metadata, loopback, link_local, over_cap), counted at every lookup.")
)

// RegisterMetrics makes the series of the families above on set (the
// discovery ones for discover: dns entries only), every label set made up
// front so the hot path never formats a name.
//
// Call it once per set. Nodes that join later are registered when they
// join; a node's series go once it has left and drained.
func (p *Pool) RegisterMetrics(set *metrics.Set) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.mset = set
	p.registerPredictorLocked(set)
	p.sessions.register(set)
	for _, n := range p.set.Load().nodes {
		p.registerNodeLocked(n)
	}
	for n := range p.retiring {
		p.registerNodeLocked(n)
	}
	p.registerDiscoveryLocked()
}

// registerNodeLocked makes n's series, or takes over those of the node of
// the same name it replaces. Gauges read whichever node has the name now.
func (p *Pool) registerNodeLocked(n *Node) {
	set := p.mset
	if set == nil {
		return
	}
	name := n.cfg.Name
	nodeInflightFamily.GetOrCreateGauge(set, func() float64 {
		var sum int64
		for _, m := range p.namedAll(name) {
			sum += m.inflight.Load()
		}
		return float64(sum)
	}, "node", name)
	nodeScoreFamily.GetOrCreateGauge(set, func() float64 {
		if m := p.Node(name); m != nil {
			return p.nodeScore(m, p.nowNanos()).Total
		}
		return 0
	}, "node", name)
	for _, s := range States {
		nodeStateFamily.GetOrCreateGauge(set, func() float64 {
			st := StateRemoved
			if m := p.Node(name); m != nil {
				st = m.state(p.nowNanos())
			}
			if st == s {
				return 1
			}
			return 0
		}, "node", name, "state", s)
	}
	for o := range n.mReq {
		c := nodeRequestsFamily.GetOrCreateCounter(set, "node", name, "outcome", Outcome(o).String())
		if v := n.requests[o].Load(); c.Get() < v {
			c.Set(v)
		}
		n.mReq[o].Store(c)
	}
	n.mTTFT.Store(nodeTTFTFamily.GetOrCreateHistogram(set, nil, "node", name))
	nodePredictedTTFTFamily.GetOrCreateGauge(set, func() float64 {
		if m := p.Node(name); m != nil {
			return m.predictedGauge()
		}
		return math.NaN()
	}, "node", name)
	for _, model := range n.cfg.Models {
		nodeModelMismatchFamily.GetOrCreateGauge(set, func() float64 {
			if m := p.Node(name); m != nil {
				if c := m.served.Load(); c != nil {
					if _, miss := c.missing[model]; miss {
						return 1
					}
				}
			}
			return 0
		}, "node", name, "model", model)
	}
	p.mismatchSeriesLocked(name, n.cfg.Models)
}

// namedAll returns the node in service called name and any retiring ones.
func (p *Pool) namedAll(name string) []*Node {
	var out []*Node
	if n := p.Node(name); n != nil {
		out = append(out, n)
	}
	p.mu.Lock()
	for n := range p.retiring {
		if n.cfg.Name == name {
			out = append(out, n)
		}
	}
	p.mu.Unlock()
	return out
}

// unregisterNodeLocked drops the series of name once no node has it.
func (p *Pool) unregisterNodeLocked(name string) {
	if p.mset == nil || p.set.Load().byName[name] != nil {
		return
	}
	for n := range p.retiring {
		if n.cfg.Name == name {
			return
		}
	}
	p.mset.UnregisterMetric(nodeInflightFamily.Series("node", name))
	p.mset.UnregisterMetric(nodeScoreFamily.Series("node", name))
	for _, s := range States {
		p.mset.UnregisterMetric(nodeStateFamily.Series("node", name, "state", s))
	}
	for o := range 3 {
		p.mset.UnregisterMetric(nodeRequestsFamily.Series("node", name, "outcome", Outcome(o).String()))
	}
	p.mset.UnregisterMetric(nodeTTFTFamily.Series("node", name))
	p.mset.UnregisterMetric(nodePredictedTTFTFamily.Series("node", name))
	for _, m := range p.mismatchSeries[name] {
		p.mset.UnregisterMetric(nodeModelMismatchFamily.Series("node", name, "model", m))
	}
	delete(p.mismatchSeries, name)
}

// mismatchSeriesLocked adds models to node name's model-mismatch series,
// dropped when the node goes. A model a reload took off a node that stays
// keeps its series, at 0.
func (p *Pool) mismatchSeriesLocked(name string, models []string) {
	if p.mismatchSeries == nil {
		p.mismatchSeries = map[string][]string{}
	}
	for _, m := range models {
		if !slices.Contains(p.mismatchSeries[name], m) {
			p.mismatchSeries[name] = append(p.mismatchSeries[name], m)
		}
	}
}
