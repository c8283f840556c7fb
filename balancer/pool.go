package balancer

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"net/url"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"
)

// Node is one GPU node as the balancer sees it.
type Node struct {
	cfg       NodeConfig
	models    map[string]bool
	healthURL string

	inflight atomic.Int64
	healthy  atomic.Bool
	drained  atomic.Bool
}

// Name returns the node's configured name.
func (n *Node) Name() string { return n.cfg.Name }

// Config returns the node's configuration.
func (n *Node) Config() NodeConfig { return n.cfg }

// Inflight returns the requests this gateway has in flight on the node.
func (n *Node) Inflight() int64 { return n.inflight.Load() }

// Healthy reports the last health verdict.
func (n *Node) Healthy() bool { return n.healthy.Load() }

// Serves reports whether the node serves model.
func (n *Node) Serves(model string) bool { return n.models[model] }

// TryAcquire takes an in-flight slot if the node is below its cap. Every
// successful call must be paired with exactly one Release.
func (n *Node) TryAcquire() bool {
	limit := int64(n.cfg.MaxConcurrency)
	for {
		cur := n.inflight.Load()
		if cur >= limit {
			return false
		}
		if n.inflight.CompareAndSwap(cur, cur+1) {
			return true
		}
	}
}

// Release gives back a slot taken by TryAcquire.
func (n *Node) Release() { n.inflight.Add(-1) }

// Outcome is the result of one attempt, reported back to the balancer.
type Outcome uint8

// Attempt outcomes.
const (
	OutcomeSuccess  Outcome = iota // answered (any non-retryable status)
	OutcomeFailure                 // connect error, timeout or retryable status
	OutcomeCanceled                // the client went away; says nothing about the node
)

// Pool holds the nodes and chooses among them.
type Pool struct {
	cfg     Config
	nodes   []*Node
	byModel map[string][]*Node
	aliases map[string][]ModelTarget
	client  *fasthttp.Client
}

// New builds a pool. Nodes start healthy until a probe says otherwise.
func New(cfg Config, nodes []NodeConfig, aliases []ModelAlias) (*Pool, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	p := &Pool{
		cfg:     cfg,
		byModel: map[string][]*Node{},
		aliases: map[string][]ModelTarget{},
		client:  &fasthttp.Client{ReadTimeout: 2 * time.Second, WriteTimeout: 2 * time.Second, NoDefaultUserAgentHeader: true},
	}
	for i := range nodes {
		nc := nodes[i]
		DefaultNode(&nc)
		if err := nc.Validate(); err != nil {
			return nil, fmt.Errorf("node %q: %w", nc.Name, err)
		}
		n := &Node{cfg: nc, models: map[string]bool{}, healthURL: nc.HealthURL}
		if n.healthURL == "" {
			n.healthURL = serverRoot(nc.URL) + "/health"
		}
		n.healthy.Store(true)
		for _, m := range nc.Models {
			n.models[m] = true
			p.byModel[m] = append(p.byModel[m], n)
		}
		p.nodes = append(p.nodes, n)
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

// serverRoot strips an OpenAI base path such as /v1 from a node URL.
func serverRoot(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return strings.TrimSuffix(raw, "/")
	}
	u.Path, u.RawQuery = "", ""
	return strings.TrimSuffix(u.String(), "/")
}

// Nodes returns every node.
func (p *Pool) Nodes() []*Node { return p.nodes }

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

// Candidates returns the nodes that may take a request for model now, best
// first: healthy, not drained, below their concurrency cap, ordered by
// in-flight load relative to weight with a random tie-break. It also
// returns whether any node serves the model at all (full or not).
func (p *Pool) Candidates(model string) (out []*Node, served bool) {
	all := p.byModel[model]
	if len(all) == 0 {
		return nil, false
	}
	out = make([]*Node, 0, len(all))
	for _, n := range all {
		if !n.healthy.Load() || n.drained.Load() || n.inflight.Load() >= int64(n.cfg.MaxConcurrency) {
			continue
		}
		out = append(out, n)
	}
	if len(out) > 1 {
		rand.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
		sort.SliceStable(out, func(i, j int) bool {
			return float64(out[i].inflight.Load())/out[i].cfg.Weight < float64(out[j].inflight.Load())/out[j].cfg.Weight
		})
	}
	return out, true
}

// AnyUsable reports whether some node serving model is healthy and not
// drained, whatever its load.
func (p *Pool) AnyUsable(model string) bool {
	for _, n := range p.byModel[model] {
		if n.healthy.Load() && !n.drained.Load() {
			return true
		}
	}
	return false
}

// Report records the outcome of one attempt on n.
func (p *Pool) Report(n *Node, o Outcome, firstByte time.Duration) {
	_ = firstByte
	if o == OutcomeFailure && n.inflight.Load() == 0 {
		// Passive health: a failure on an idle node is a strong signal; the
		// next active probe restores it if it is back.
		n.healthy.Store(false)
	}
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

// Run probes every node's health endpoint every health_interval until ctx
// ends.
func (p *Pool) Run(ctx context.Context) {
	t := time.NewTicker(p.cfg.HealthInterval.D())
	defer t.Stop()
	for {
		p.ProbeAll()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// ProbeAll runs one round of health probes.
func (p *Pool) ProbeAll() {
	for _, n := range p.nodes {
		n.healthy.Store(p.probe(n))
	}
}

func (p *Pool) probe(n *Node) bool {
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.SetRequestURI(n.healthURL)
	timeout := p.cfg.HealthInterval.D()
	if timeout > 2*time.Second {
		timeout = 2 * time.Second
	}
	if err := p.client.DoTimeout(req, resp, timeout); err != nil {
		return false
	}
	return resp.StatusCode() == fasthttp.StatusOK
}
