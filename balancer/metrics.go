package balancer

import (
	"math"
	"strings"

	"github.com/VictoriaMetrics/metrics"
)

// RegisterMetrics registers the per-node series on set, every label set
// made up front so the hot path never formats a name:
//
//	frontdoor_node_inflight{node}               gauge
//	frontdoor_node_score{node}                  gauge, as in Status
//	frontdoor_node_state{node,state}            gauge, 1 for the current state
//	frontdoor_node_requests_total{node,outcome} counter (success, failure, canceled)
//	frontdoor_node_ttft_seconds{node}           histogram of the first-byte times reported
//	frontdoor_node_predicted_ttft_seconds{node} gauge, the node's last known TTFT prediction (NaN: none)
//	frontdoor_ttft_prediction_error_seconds     histogram of |predicted − measured| TTFT, known predictions of streams
//	frontdoor_balancer_sessions_total{outcome}  counter of conversation turns routed: new, stayed, moved
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
	lbl := `node="` + escapeLabel(name) + `"`
	set.GetOrCreateGauge(`frontdoor_node_inflight{`+lbl+`}`, func() float64 {
		var sum int64
		for _, m := range p.namedAll(name) {
			sum += m.inflight.Load()
		}
		return float64(sum)
	})
	set.GetOrCreateGauge(`frontdoor_node_score{`+lbl+`}`, func() float64 {
		if m := p.Node(name); m != nil {
			return p.nodeScore(m, p.nowNanos()).Total
		}
		return 0
	})
	for _, s := range States {
		set.GetOrCreateGauge(`frontdoor_node_state{`+lbl+`,state="`+s+`"}`, func() float64 {
			st := StateRemoved
			if m := p.Node(name); m != nil {
				st = m.state(p.nowNanos())
			}
			if st == s {
				return 1
			}
			return 0
		})
	}
	for o := range n.mReq {
		c := set.GetOrCreateCounter(`frontdoor_node_requests_total{` + lbl + `,outcome="` + Outcome(o).String() + `"}`)
		if v := n.requests[o].Load(); c.Get() < v {
			c.Set(v)
		}
		n.mReq[o].Store(c)
	}
	n.mTTFT.Store(set.GetOrCreatePrometheusHistogram(`frontdoor_node_ttft_seconds{` + lbl + `}`))
	set.GetOrCreateGauge(`frontdoor_node_predicted_ttft_seconds{`+lbl+`}`, func() float64 {
		if m := p.Node(name); m != nil {
			return m.predictedGauge()
		}
		return math.NaN()
	})
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
	lbl := `node="` + escapeLabel(name) + `"`
	p.mset.UnregisterMetric(`frontdoor_node_inflight{` + lbl + `}`)
	p.mset.UnregisterMetric(`frontdoor_node_score{` + lbl + `}`)
	for _, s := range States {
		p.mset.UnregisterMetric(`frontdoor_node_state{` + lbl + `,state="` + s + `"}`)
	}
	for o := range 3 {
		p.mset.UnregisterMetric(`frontdoor_node_requests_total{` + lbl + `,outcome="` + Outcome(o).String() + `"}`)
	}
	p.mset.UnregisterMetric(`frontdoor_node_ttft_seconds{` + lbl + `}`)
	p.mset.UnregisterMetric(`frontdoor_node_predicted_ttft_seconds{` + lbl + `}`)
}

var labelEscaper = strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`)

func escapeLabel(s string) string { return labelEscaper.Replace(s) }
