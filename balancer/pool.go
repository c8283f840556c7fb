package balancer

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"net/url"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"
)

// Outcome is the result of one attempt, reported back to the balancer.
type Outcome uint8

// Attempt outcomes.
const (
	OutcomeSuccess  Outcome = iota // answered (any non-retryable status)
	OutcomeFailure                 // connect error, timeout or retryable status
	OutcomeCanceled                // the client went away; says nothing about the node
)

var outcomeNames = [...]string{"success", "failure", "canceled"}

// String returns the outcome's metric label.
func (o Outcome) String() string {
	if int(o) < len(outcomeNames) {
		return outcomeNames[o]
	}
	return "unknown"
}

type policy uint8

const (
	policyScore policy = iota
	policyRoundRobin
	policyLeastInflight
)

// Pool holds the nodes and chooses among them.
type Pool struct {
	cfg     Config
	policy  policy
	nodes   []*Node
	byName  map[string]*Node
	byModel map[string][]*Node
	queues  map[string]*slotQueue
	aliases map[string][]ModelTarget
	client  *fasthttp.Client
	now     func() time.Time
	rr      atomic.Uint64

	halfOpenProbes int
}

// Option adjusts a pool built by New.
type Option func(*Pool)

// WithClock replaces time.Now, so tests can drive staleness, ejection
// cooldowns and breaker timing deterministically.
func WithClock(now func() time.Time) Option { return func(p *Pool) { p.now = now } }

// New builds a pool. Nodes start healthy until a probe says otherwise, with
// unknown engine metrics until the first scrape.
func New(cfg Config, nodes []NodeConfig, aliases []ModelAlias, opts ...Option) (*Pool, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	p := &Pool{
		cfg:     cfg,
		byName:  map[string]*Node{},
		byModel: map[string][]*Node{},
		queues:  map[string]*slotQueue{},
		aliases: map[string][]ModelTarget{},
		client: &fasthttp.Client{ReadTimeout: 2 * time.Second, WriteTimeout: 2 * time.Second,
			NoDefaultUserAgentHeader: true, MaxResponseBodySize: 16 << 20},
		now:            time.Now,
		halfOpenProbes: max(1, cfg.Breaker.HalfOpenProbes),
	}
	switch cfg.Policy {
	case "round_robin":
		p.policy = policyRoundRobin
	case "least_inflight":
		p.policy = policyLeastInflight
	}
	for _, o := range opts {
		o(p)
	}
	for i := range nodes {
		nc := nodes[i]
		DefaultNode(&nc)
		if err := nc.Validate(); err != nil {
			return nil, fmt.Errorf("node %q: %w", nc.Name, err)
		}
		if p.byName[nc.Name] != nil {
			return nil, fmt.Errorf("node %q: name: is not unique", nc.Name)
		}
		n := &Node{p: p, cfg: nc, kind: parseKind(nc.Kind), models: map[string]bool{},
			healthURL: nc.HealthURL, metricsURL: nc.MetricsURL, seed: hash64(nc.Name)}
		if n.healthURL == "" {
			n.healthURL = serverRoot(nc.URL) + "/health"
		}
		if n.metricsURL == "" {
			n.metricsURL = serverRoot(nc.URL) + "/metrics"
		}
		n.healthy.Store(true)
		for _, m := range nc.Models {
			if n.models[m] {
				continue
			}
			n.models[m] = true
			p.byModel[m] = append(p.byModel[m], n)
			q := p.queues[m]
			if q == nil {
				q = newSlotQueue()
				p.queues[m] = q
			}
			n.queues = append(n.queues, q)
		}
		p.nodes = append(p.nodes, n)
		p.byName[nc.Name] = n
	}
	for _, a := range aliases {
		var sum float64
		for _, t := range a.Targets {
			sum += t.Weight
		}
		if sum <= 0 {
			return nil, fmt.Errorf("models: alias %q has no positive weight", a.Name)
		}
		p.aliases[a.Name] = a.Targets
	}
	return p, nil
}

func (p *Pool) nowNanos() int64 { return p.now().UnixNano() }

// serverRoot strips an OpenAI base path such as /v1 from a node URL.
func serverRoot(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return strings.TrimSuffix(raw, "/")
	}
	u.Path, u.RawQuery = "", ""
	return strings.TrimSuffix(u.String(), "/")
}

func hash64(s string) uint64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(s))
	return h.Sum64()
}

// Nodes returns every node, in configuration order.
func (p *Pool) Nodes() []*Node { return p.nodes }

// Node returns the node called name, or nil.
func (p *Pool) Node(name string) *Node { return p.byName[name] }

// Config returns the balancer configuration.
func (p *Pool) Config() Config { return p.cfg }

// Resolve maps a requested model to the model to serve: an alias picks one
// of its weighted targets, deterministically for a given request id, so a
// retry keeps its target. ok is false for a model that is neither served nor
// an alias.
func (p *Pool) Resolve(model, requestID string) (string, bool) {
	targets, isAlias := p.aliases[model]
	if !isAlias {
		_, served := p.byModel[model]
		return model, served
	}
	var sum float64
	for _, t := range targets {
		sum += t.Weight
	}
	h := fnv.New64a()
	_, _ = h.Write([]byte(requestID))
	x := float64(h.Sum64()%1_000_000) / 1_000_000 * sum
	for _, t := range targets {
		if x < t.Weight {
			return t.Model, true
		}
		x -= t.Weight
	}
	return targets[len(targets)-1].Model, true
}

// Models returns the served model names and the alias names.
func (p *Pool) Models() (served, aliases []string) {
	for m := range p.byModel {
		served = append(served, m)
	}
	for a := range p.aliases {
		aliases = append(aliases, a)
	}
	sort.Strings(served)
	sort.Strings(aliases)
	return served, aliases
}

// ErrNoNode means no node serves the model.
var ErrNoNode = errors.New("no node serves this model")

// ErrUnknownNode means no node has the given name.
var ErrUnknownNode = errors.New("unknown node")

// verdict is why a node may or may not take a request now.
type verdict uint8

const (
	admitOK verdict = iota
	admitUnhealthy
	admitDrained
	admitBreakerOpen // open, or half-open with every trial slot taken
	admitEjected
	admitFull
)

var verdictNames = [...]string{"ok", "unhealthy", "drained", "breaker_open", "ejected", "full"}

func (v verdict) String() string { return verdictNames[v] }

// admit applies the filters (serving the model is the caller's: it only
// passes nodes that do).
func (n *Node) admit(now int64) verdict {
	switch {
	case !n.healthy.Load():
		return admitUnhealthy
	case n.drained.Load():
		return admitDrained
	case n.inflight.Load() >= int64(n.cfg.MaxConcurrency):
		return admitFull
	case !n.breakerAllows(now):
		return admitBreakerOpen
	case n.ejected.Load():
		return admitEjected
	}
	return admitOK
}

// AnyUsable reports whether some node serving model is healthy, not drained
// and not cut off by its breaker, whatever its load.
func (p *Pool) AnyUsable(model string) bool {
	now := p.nowNanos()
	for _, n := range p.byModel[model] {
		if v := n.admit(now); v == admitOK || v == admitFull || v == admitEjected {
			return true
		}
	}
	return false
}

// Ready reports whether at least one node is healthy and not drained.
func (p *Pool) Ready() bool {
	for _, n := range p.nodes {
		if n.healthy.Load() && !n.drained.Load() {
			return true
		}
	}
	return false
}

// Report records the outcome of one attempt on n: request counters, the
// breaker, passive health, and the time to the first byte (0 = unknown;
// pass it for streams, where it is the time to the first token).
func (p *Pool) Report(n *Node, o Outcome, firstByte time.Duration) {
	if int(o) >= len(n.requests) {
		return
	}
	n.requests[o].Add(1)
	if c := n.mReq[o].Load(); c != nil {
		c.Inc()
	}
	if o == OutcomeSuccess && firstByte > 0 {
		n.ttft.observe(firstByte.Seconds(), p.nowNanos())
		if h := n.mTTFT.Load(); h != nil {
			h.Update(firstByte.Seconds())
		}
	}
	if o == OutcomeFailure && n.inflight.Load() == 0 {
		// Passive health: a failure on an otherwise idle node is a strong
		// signal; the next active probe restores it if it is back.
		n.healthy.Store(false)
	}
	if o != OutcomeFailure && n.brState.Load() == breakerClosed {
		return // the common case needs no lock
	}
	now := p.nowNanos()
	n.mu.Lock()
	n.recordLocked(o, now)
	n.mu.Unlock()
}

// ReportTokens records a finished answer's decode speed: tokens generated
// after the first one, over d, the time from the first token to the last.
func (p *Pool) ReportTokens(n *Node, tokens int, d time.Duration) {
	if tokens <= 0 || d <= 0 {
		return
	}
	n.tpot.observe(d.Seconds()/float64(tokens), p.nowNanos())
}

// WaitForSlot blocks until a node serving model could take a request (a
// Release, an undrain or a recovery wakes it; nothing polls), maxWait
// passes or ctx ends. It reports whether a slot looked free; the caller
// must still Pick and TryAcquire, and may lose the race and wait again.
func (p *Pool) WaitForSlot(ctx context.Context, model string, maxWait time.Duration) bool {
	q := p.queues[model]
	if q == nil {
		return false
	}
	if p.hasSlot(model) {
		return true
	}
	if maxWait <= 0 {
		return false
	}
	q.waiters.Add(1)
	defer q.waiters.Add(-1)
	t := time.NewTimer(maxWait)
	defer t.Stop()
	for {
		ch := q.wait()
		// Checked after taking the channel: a Release in between closed an
		// older channel, but its slot is seen here.
		if p.hasSlot(model) {
			return true
		}
		select {
		case <-ch:
		case <-t.C:
			return false
		case <-ctx.Done():
			return false
		}
	}
}

// hasSlot reports whether Pick would return a node for model now.
func (p *Pool) hasSlot(model string) bool {
	now := p.nowNanos()
	ejected, full := false, false
	for _, n := range p.byModel[model] {
		switch n.admit(now) {
		case admitOK:
			return true
		case admitEjected:
			ejected = ejected || n.admitIgnoringEjection(now)
		case admitFull:
			full = full || !n.ejected.Load()
		}
	}
	return ejected && !full
}

// Drain stops new requests to the node called name; its in-flight requests
// finish.
func (p *Pool) Drain(name string) error {
	n := p.byName[name]
	if n == nil {
		return fmt.Errorf("drain %q: %w", name, ErrUnknownNode)
	}
	n.drained.Store(true)
	return nil
}

// Undrain lets the node called name take requests again.
func (p *Pool) Undrain(name string) error {
	n := p.byName[name]
	if n == nil {
		return fmt.Errorf("undrain %q: %w", name, ErrUnknownNode)
	}
	if n.drained.Swap(false) {
		n.wake()
	}
	return nil
}
