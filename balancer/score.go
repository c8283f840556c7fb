package balancer

import (
	"math"
	"math/rand/v2"
)

// Hints is what the router knows of a request that the score policy can
// use. The zero value means none.
type Hints struct {
	// Affinity is a hash of what the request shares with others, such as
	// its system prompt (0 = none); with a non-zero affinity weight,
	// requests with the same key prefer the same node (rendezvous hashing).
	Affinity uint64
	// Prefix is the request's prompt prefix (nil = none), from
	// Pool.PrefixHasher; with a non-zero prefix weight, nodes score the
	// share of it they likely hold in their KV cache.
	Prefix *Prefix
	// PromptTokens is the request's estimated prompt tokens, for the TTFT
	// predictor when Prefix is nil (the prefix hasher is off); with a
	// Prefix, its Tokens count.
	PromptTokens int
}

// Pick is PickWith with only an affinity key.
func (p *Pool) Pick(model string, affinity uint64) (out []*Node, served bool) {
	return p.PickWith(model, Hints{Affinity: affinity})
}

// PickWith returns the nodes that may take a request for model now, best
// first; retries walk down the list. served reports whether any node
// serves the model at all (full or not).
//
// Filters: serving the model by its engine's own list (ModelMismatch),
// healthy, not drained, below max_concurrency, breaker not open
// (half-open: a trial slot free), not ejected. Ejected nodes are used only
// when every other node serving the model is down, drained, cut off or
// ejected too (never while another is merely full): ejection sheds load, it
// must not turn overload into an outage.
//
// Order: by policy. score: the weighted score (see doc.go), round_robin:
// rotating, least_inflight: in-flight ÷ weight. Ties break at random. The
// returned slice is the only allocation.
func (p *Pool) PickWith(model string, h Hints) (out []*Node, served bool) {
	st := p.st.Load()
	ns := p.set.Load()
	all := ns.byModel[model]
	if len(all) == 0 {
		return nil, ns.served[model]
	}
	now := p.nowNanos()
	out = make([]*Node, 0, len(all))
	start := 0
	if st.policy == policyRoundRobin {
		start = int(p.rr.Add(1) % uint64(len(all)))
	}
	ejected, full := 0, 0
	for i := range all {
		n := all[(start+i)%len(all)]
		if n.mismatched(model) {
			continue
		}
		switch n.admit(now) {
		case admitOK:
			out = append(out, n)
		case admitEjected:
			ejected++
		case admitFull:
			if !n.ejected.Load() {
				full++
			}
		}
	}
	if len(out) == 0 && ejected > 0 && full == 0 {
		for i := range all {
			n := all[(start+i)%len(all)]
			if !n.mismatched(model) && n.admitIgnoringEjection(now) {
				out = append(out, n)
			}
		}
	}
	if len(out) < 2 || st.policy == policyRoundRobin {
		return out, true
	}
	var buf [16]ranked
	items := buf[:0]
	if len(out) > len(buf) {
		items = make([]ranked, 0, len(out))
	}
	switch st.policy {
	case policyLeastInflight:
		for _, n := range out {
			items = append(items, ranked{n: n, key: -float64(n.inflight.Load()) / n.cfg.Weight, tie: rand.Uint32()})
		}
	default:
		items = p.scoreAll(out, h, now, items)
	}
	sortRanked(items)
	for i := range items {
		out[i] = items[i].n
	}
	return out, true
}

func (n *Node) admitIgnoringEjection(now int64) bool {
	return n.healthy.Load() && !n.drained.Load() && n.inflight.Load() < int64(n.cfg.MaxConcurrency) && n.breakerAllows(now)
}

// ranked is a node with its sort key (higher first) and a random tie-break.
type ranked struct {
	n   *Node
	key float64
	tie uint32
}

// sortRanked is an insertion sort: lists are short, and it allocates
// nothing.
func sortRanked(a []ranked) {
	for i := 1; i < len(a); i++ {
		for j := i; j > 0 && a[j].before(a[j-1]); j-- {
			a[j], a[j-1] = a[j-1], a[j]
		}
	}
}

func (r ranked) before(o ranked) bool {
	if r.key != o.key {
		return r.key > o.key
	}
	return r.tie < o.tie
}

// ScoreParts are one node's component scores, each in [0,1], and the
// weighted total (scaled by the node's weight).
type ScoreParts struct {
	Queue    float64 `json:"queue"`
	Latency  float64 `json:"latency"`
	Memory   float64 `json:"memory"`
	Affinity float64 `json:"affinity"`
	Prefix   float64 `json:"prefix"`
	Total    float64 `json:"total"`
}

// unknownScore is what a component scores when its signal is unknown or
// stale: neutral, and never better than a node known to be idle (1).
const unknownScore = 0.5

// scoreAll appends the candidates with their scores to items.
func (p *Pool) scoreAll(cands []*Node, h Hints, now int64, items []ranked) []ranked {
	best := p.bestTTFT(cands, now)
	var winner *Node
	if h.Affinity != 0 && p.conf().Weights.Affinity > 0 {
		winner = rendezvous(cands, h.Affinity)
	}
	px := h.Prefix
	if p.conf().Weights.Prefix <= 0 {
		px = nil
	}
	minLoad := math.Inf(1)
	var home *Node
	if px != nil {
		for _, n := range cands {
			minLoad = min(minLoad, p.load(n, now))
		}
		home = p.sessions.home(px.session)
	}
	for _, n := range cands {
		f := factors{bestTTFT: best, withAffinity: h.Affinity != 0, affinityWinner: n == winner, prefix: px, minLoad: minLoad}
		s := p.score(n, now, f)
		key := s.Total
		if home != nil && n.cfg.Name == home.cfg.Name && !p.prefixGuarded(p.load(n, now), minLoad) {
			key = math.Inf(1) // the conversation stays (see doc.go, Stickiness)
		}
		items = append(items, ranked{n: n, key: key, tie: rand.Uint32()})
	}
	return items
}

// factors are what a node's score depends on beyond the node itself.
type factors struct {
	bestTTFT       float64 // the lowest fresh TTFT among the candidates
	withAffinity   bool    // the request has an affinity key
	affinityWinner bool    // this node is the key's rendezvous winner
	prefix         *Prefix // the request's prefix; nil leaves the prefix weight out
	minLoad        float64 // the least loaded candidate's load (prefix only)
}

// load is the node's estimated requests, running and waiting: the
// engine's own counts from a fresh scrape, corrected by our in-flight
// change since, or our in-flight count alone.
func (p *Pool) load(n *Node, now int64) float64 {
	inflight := n.inflight.Load()
	m := p.fresh(n, now)
	if m == nil || math.IsNaN(m.waiting) || math.IsNaN(m.running) {
		return float64(inflight)
	}
	return max(float64(inflight), m.running+m.waiting+float64(inflight-m.inflight))
}

// prefixGuarded is the load guard, after SGLang's cache-aware policy and
// its balance thresholds: a node whose load exceeds the least loaded
// candidate's by more than balance_abs and is more than balance_rel times
// it gets no credit for its prefix, so that load decides.
func (p *Pool) prefixGuarded(load, minLoad float64) bool {
	c := p.conf().Prefix
	return load-minLoad > c.BalanceAbs && load > c.BalanceRel*minLoad
}

// bestTTFT is the lowest fresh TTFT average among the nodes, 0 if none.
func (p *Pool) bestTTFT(nodes []*Node, now int64) float64 {
	best := 0.0
	for _, n := range nodes {
		if v, ok := p.ttftOf(n, now); ok && (best == 0 || v < best) {
			best = v
		}
	}
	return best
}

// latencyStaleFactor × stale_after is how long a TTFT average stays known
// without new samples, so a node avoided for a spike gets re-measured.
const latencyStaleFactor = 10

func (p *Pool) ttftOf(n *Node, now int64) (float64, bool) {
	v, at, ok := n.ttft.get()
	if !ok || now-at > latencyStaleFactor*int64(p.conf().StaleAfter) {
		return 0, false
	}
	return v, true
}

// fresh returns the node's last scrape if it is younger than stale_after.
func (p *Pool) fresh(n *Node, now int64) *engineMetrics {
	m := n.scraped.Load()
	if m == nil || now-m.at > int64(p.conf().StaleAfter) {
		return nil
	}
	return m
}

// score computes one node's score.
func (p *Pool) score(n *Node, now int64, f factors) ScoreParts {
	w := p.conf().Weights
	m := p.fresh(n, now)
	var s ScoreParts
	s.Queue = queueScore(n.inflight.Load(), n.cfg.MaxConcurrency, math.Float64frombits(n.slots.Load()), m)
	ttft, ok := p.ttftOf(n, now)
	s.Latency = latencyScore(ttft, ok, f.bestTTFT)
	s.Memory = memoryScore(m)
	sum := w.Queue + w.Latency + w.Memory
	total := w.Queue*s.Queue + w.Latency*s.Latency + w.Memory*s.Memory
	if f.withAffinity {
		if f.affinityWinner {
			s.Affinity = 1
		}
		sum += w.Affinity
		total += w.Affinity * s.Affinity
	}
	if f.prefix != nil {
		if !p.prefixGuarded(p.load(n, now), f.minLoad) {
			s.Prefix = p.prefixShare(n, f.prefix)
		}
		sum += w.Prefix
		total += w.Prefix * s.Prefix
	}
	if sum > 0 {
		total /= sum
	}
	s.Total = total * n.cfg.Weight
	return s
}

// queueScore scores load, 1 = idle. With a fresh scrape the engine's own
// running and waiting counts are used (they include other gateways'
// traffic), corrected by the change in this gateway's in-flight count since
// the scrape, so a burst does not pile onto a node that looked idle a
// second ago. Without one, only our own in-flight count is known, and the
// score is halved (unknown is never better than known-idle).
//
// Occupancy o is running ÷ slots, where slots is max_concurrency, or the
// engine's batch size if it has been seen queueing below that. w is the
// estimated number of waiting requests. Score = (1 − 0.75·o²) ÷ (1 + w):
// joining a batch with free slots costs little (gently falling at first),
// while every request queued ahead adds a full wait.
func queueScore(inflight int64, maxConc int, learnedSlots float64, m *engineMetrics) float64 {
	slots := float64(maxConc)
	if m == nil || math.IsNaN(m.waiting) || math.IsNaN(m.running) {
		o := min(1, float64(inflight)/slots)
		return unknownScore * (1 - 0.75*o*o)
	}
	if learnedSlots > 0 && learnedSlots < slots {
		slots = learnedSlots
	}
	d := float64(inflight - m.inflight)
	total := max(float64(inflight), m.running+m.waiting+d)
	var w float64
	if m.waiting > 0 {
		w = max(0, m.waiting+d) // the engine is full: ours joined (or left) its queue
	} else {
		w = max(0, total-slots)
	}
	o := min(1, max(0, total-w)/slots)
	return (1 - 0.75*o*o) / (1 + w)
}

// latencyFloor is added to both sides of the latency ratio, so that
// differences far below network and scheduling noise (1ms against 2ms)
// are not mistaken for one node being twice as fast.
const latencyFloor = 0.025

// latencyScore is (best + floor) ÷ (ttft + floor): 1 for the fastest
// candidate, about 0.23 for 300ms against 50ms. Unknown scores
// unknownScore.
func latencyScore(ttft float64, known bool, best float64) float64 {
	if !known || best <= 0 || ttft <= 0 {
		return unknownScore
	}
	return min(1, (best+latencyFloor)/(ttft+latencyFloor))
}

// memoryScore is 1 − KV-cache usage; unknown scores unknownScore.
func memoryScore(m *engineMetrics) float64 {
	if m == nil || math.IsNaN(m.kv) {
		return unknownScore
	}
	return 1 - m.kv
}

// rendezvous returns the node with the highest hash of (key, node): each
// key has a stable favourite, and losing a node only moves its own keys.
func rendezvous(nodes []*Node, key uint64) *Node {
	var best *Node
	var bestH uint64
	for _, n := range nodes {
		if h := mix64(key ^ n.seed); best == nil || h > bestH {
			best, bestH = n, h
		}
	}
	return best
}

// mix64 is the splitmix64 finaliser.
func mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}
