package balancer

import (
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
//
// Call it once per set.
func (p *Pool) RegisterMetrics(set *metrics.Set) {
	for _, n := range p.nodes {
		lbl := `node="` + escapeLabel(n.cfg.Name) + `"`
		set.NewGauge(`frontdoor_node_inflight{`+lbl+`}`, func() float64 { return float64(n.inflight.Load()) })
		set.NewGauge(`frontdoor_node_score{`+lbl+`}`, func() float64 { return p.nodeScore(n, p.nowNanos()).Total })
		for _, s := range States {
			set.NewGauge(`frontdoor_node_state{`+lbl+`,state="`+s+`"}`, func() float64 {
				if n.state(p.nowNanos()) == s {
					return 1
				}
				return 0
			})
		}
		for o := range n.mReq {
			c := set.NewCounter(`frontdoor_node_requests_total{` + lbl + `,outcome="` + Outcome(o).String() + `"}`)
			c.Set(n.requests[o].Load())
			n.mReq[o].Store(c)
		}
		n.mTTFT.Store(set.NewPrometheusHistogram(`frontdoor_node_ttft_seconds{` + lbl + `}`))
	}
}

var labelEscaper = strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`)

func escapeLabel(s string) string { return labelEscaper.Replace(s) }
