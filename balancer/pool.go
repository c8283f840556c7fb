package balancer

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"net/netip"
	"net/url"
	"reflect"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/valyala/fasthttp"

	"frontdoor/internal/redact"
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

// settings is the part of the configuration the hot path reads, swapped
// whole by Update.
type settings struct {
	cfg            Config
	policy         policy
	halfOpenProbes int
	disc           Discoverer
}

// nodeSet is one version of the node set, swapped whole by Update and by
// discovery; a request keeps the version it picked from.
type nodeSet struct {
	nodes   []*Node
	byName  map[string]*Node
	byModel map[string][]*Node
	queues  map[string]*slotQueue
	aliases map[string][]ModelTarget
	served  map[string]bool // models some entry serves, with or without nodes now
}

// Pool holds the nodes and chooses among them. The node set changes on
// Update (a config reload) and when discovery finds other addresses: a node
// that leaves drains (its requests finish, it takes no new ones) and is
// then forgotten.
type Pool struct {
	st     atomic.Pointer[settings]
	set    atomic.Pointer[nodeSet]
	client *fasthttp.Client
	now    func() time.Time
	rr     atomic.Uint64
	log    *slog.Logger
	// fixedDisc, set by WithDiscoverer, replaces the DNS discoverer.
	fixedDisc Discoverer
	onRemove  func(*Node)
	self      func() []netip.AddrPort // the gateway's own listen addresses; nil: unknown

	mu       sync.Mutex // serialises changes to the node set; guards the fields below
	entries  []NodeConfig
	aliases  map[string][]ModelTarget
	queues   map[string]*slotQueue // every model's queue, kept across versions
	found    map[string][]netip.Addr
	discErr  map[string]discoveryError
	drops    map[string]*dropState
	retiring map[*Node]struct{}
	mset     *metrics.Set
	runCtx   context.Context
	stopped  bool
	loops    map[any]context.CancelFunc // *Node or a discovery key
	wg       sync.WaitGroup
}

// Option adjusts a pool built by New.
type Option func(*Pool)

// WithClock replaces time.Now, so tests can drive staleness, ejection
// cooldowns and breaker timing deterministically.
func WithClock(now func() time.Time) Option { return func(p *Pool) { p.now = now } }

// WithLogger sets where discovery reports changes and failures.
func WithLogger(l *slog.Logger) Option { return func(p *Pool) { p.log = l } }

// WithDiscoverer replaces the DNS discoverer built from dns_resolver.
func WithDiscoverer(d Discoverer) Option { return func(p *Pool) { p.fixedDisc = d } }

// WithSelfAddrs gives the addresses the gateway listens on, read at every
// discovery lookup: an address found by discovery that, with the node's
// port, is one of them never becomes a node (requests would loop back to
// the gateway). An unspecified address (0.0.0.0:8080, [::]:8080) stands
// for every address of this host with that port: loopback ones and those
// of its interfaces.
func WithSelfAddrs(f func() []netip.AddrPort) Option { return func(p *Pool) { p.self = f } }

// WithOnRemove registers f, called once a node that left the set has
// drained (no request in flight), so that its owner can drop what it keeps
// for the node (a connection pool). It runs with the pool's lock held: it
// must not call the pool.
func WithOnRemove(f func(*Node)) Option { return func(p *Pool) { p.onRemove = f } }

// New builds a pool. Nodes start healthy until a probe says otherwise, with
// unknown engine metrics until the first scrape. Entries with discover: dns
// have no node until Run resolves them.
func New(cfg Config, nodes []NodeConfig, aliases []ModelAlias, opts ...Option) (*Pool, error) {
	p := &Pool{
		client: &fasthttp.Client{ReadTimeout: 2 * time.Second, WriteTimeout: 2 * time.Second,
			NoDefaultUserAgentHeader: true, MaxResponseBodySize: 16 << 20},
		now:      time.Now,
		log:      slog.New(slog.DiscardHandler),
		queues:   map[string]*slotQueue{},
		found:    map[string][]netip.Addr{},
		discErr:  map[string]discoveryError{},
		drops:    map[string]*dropState{},
		retiring: map[*Node]struct{}{},
		loops:    map[any]context.CancelFunc{},
	}
	for _, o := range opts {
		o(p)
	}
	p.set.Store(&nodeSet{byName: map[string]*Node{}, byModel: map[string][]*Node{}, queues: map[string]*slotQueue{}, served: map[string]bool{}})
	if err := p.Update(cfg, nodes, aliases); err != nil {
		return nil, err
	}
	return p, nil
}

// Update replaces the balancer settings, the node entries and the aliases
// in place. Nodes whose entry is unchanged keep their state; a changed
// entry gives a new node (keeping health, drain and latency averages) and
// the old one drains, so requests in flight finish on the settings they
// started with. Nothing changes if the new configuration is invalid.
func (p *Pool) Update(cfg Config, nodes []NodeConfig, aliases []ModelAlias) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	entries := make([]NodeConfig, 0, len(nodes))
	seen := map[string]bool{}
	for i := range nodes {
		nc := nodes[i]
		DefaultNode(&nc)
		if err := nc.Validate(); err != nil {
			return fmt.Errorf("node %q: %w", nc.Name, err)
		}
		if seen[nc.Name] {
			return fmt.Errorf("node %q: name: is not unique", nc.Name)
		}
		seen[nc.Name] = true
		entries = append(entries, nc)
	}
	am := make(map[string][]ModelTarget, len(aliases))
	for _, a := range aliases {
		var sum float64
		for _, t := range a.Targets {
			sum += t.Weight
		}
		if sum <= 0 {
			return fmt.Errorf("models: alias %q has no positive weight", a.Name)
		}
		am[a.Name] = a.Targets
	}
	st := &settings{cfg: cfg, halfOpenProbes: max(1, cfg.Breaker.HalfOpenProbes), disc: p.fixedDisc}
	switch cfg.Policy {
	case "round_robin":
		st.policy = policyRoundRobin
	case "least_inflight":
		st.policy = policyLeastInflight
	}
	if st.disc == nil {
		st.disc = NewDNSDiscoverer(cfg.DNSResolver)
	}

	p.mu.Lock()
	defer p.mu.Unlock()
	p.st.Store(st)
	// Forget what was found for entries that are gone or now name another host.
	for name := range p.found {
		keep := false
		for _, e := range entries {
			if e.Name == name && e.Discover != "" && p.discoveredURL(name) == e.URL {
				keep = true
			}
		}
		if !keep {
			delete(p.found, name)
			delete(p.discErr, name)
			delete(p.drops, name)
		}
	}
	// What was found stays until the next lookup, under the new filter
	// (discover_allow, discover_max_nodes).
	for _, e := range entries {
		if addrs, ok := p.found[e.Name]; ok {
			p.found[e.Name], _ = filterAddrs(e, addrs, nil)
		}
	}
	p.entries, p.aliases = entries, am
	p.rebuildLocked()
	p.registerDiscoveryLocked()
	p.reconcileDiscoveryLocked()
	return nil
}

// discoveredURL is the URL of the entry called name as last applied.
func (p *Pool) discoveredURL(name string) string {
	for _, e := range p.entries {
		if e.Name == name {
			return e.URL
		}
	}
	return ""
}

// rebuildLocked computes the node set from the entries and what discovery
// found, and swaps it in.
func (p *Pool) rebuildLocked() {
	old := p.set.Load()
	ns := &nodeSet{byName: map[string]*Node{}, byModel: map[string][]*Node{}, queues: map[string]*slotQueue{},
		aliases: p.aliases, served: map[string]bool{}}
	var added []*Node
	for _, e := range p.entries {
		for _, m := range e.Models {
			ns.served[m] = true
			ns.queues[m] = p.queueLocked(m)
		}
		want := []NodeConfig{e}
		if e.Discover != "" {
			want = expand(e, p.found[e.Name])
		}
		for _, nc := range want {
			if ns.byName[nc.Name] != nil {
				continue // a static entry named like a discovered node wins
			}
			n := old.byName[nc.Name]
			if n == nil || !reflect.DeepEqual(n.cfg, nc) {
				nn := p.newNode(nc, e.Name)
				if n != nil {
					nn.inherit(n)
				}
				n = nn
				added = append(added, n)
			}
			ns.nodes = append(ns.nodes, n)
			ns.byName[nc.Name] = n
			for _, m := range nc.Models {
				ns.byModel[m] = append(ns.byModel[m], n)
				ns.queues[m] = p.queueLocked(m)
			}
		}
	}
	for _, n := range added {
		for m := range n.models {
			n.queues = append(n.queues, p.queueLocked(m))
		}
		p.registerNodeLocked(n)
	}
	p.set.Store(ns)
	for _, n := range old.nodes {
		if ns.byName[n.cfg.Name] != n {
			p.retireLocked(n)
		}
	}
	for _, n := range added {
		p.startNodeLocked(n)
	}
	for _, q := range ns.queues {
		if q.waiters.Load() > 0 {
			q.signal() // new capacity, perhaps
		}
	}
}

func (p *Pool) queueLocked(model string) *slotQueue {
	q := p.queues[model]
	if q == nil {
		q = newSlotQueue()
		p.queues[model] = q
	}
	return q
}

func (p *Pool) newNode(nc NodeConfig, entry string) *Node {
	n := &Node{p: p, cfg: nc, kind: parseKind(nc.Kind), models: map[string]bool{},
		healthURL: nc.HealthURL, metricsURL: nc.MetricsURL, seed: hash64(nc.Name)}
	if entry != nc.Name {
		n.entry = entry
	}
	if n.healthURL == "" {
		n.healthURL = serverRoot(nc.URL) + "/health"
	}
	if n.metricsURL == "" {
		n.metricsURL = serverRoot(nc.URL) + "/metrics"
	}
	n.shownURL, n.shownHealthURL, n.shownMetricsURL = redact.URL(nc.URL), redact.URL(n.healthURL), redact.URL(n.metricsURL)
	n.healthy.Store(true)
	for _, m := range nc.Models {
		n.models[m] = true
	}
	return n
}

// inherit carries over what stays true of a node whose entry changed: its
// health, an operator's drain, and its latency averages.
func (n *Node) inherit(old *Node) {
	n.healthy.Store(old.healthy.Load())
	n.drained.Store(old.drained.Load())
	n.ttft.bits.Store(old.ttft.bits.Load())
	n.ttft.at.Store(old.ttft.at.Load())
	n.tpot.bits.Store(old.tpot.bits.Load())
	n.tpot.at.Store(old.tpot.at.Load())
	for o := range n.requests {
		n.requests[o].Store(old.requests[o].Load())
	}
}

// retireLocked takes n out of service: it takes no new request, and once
// its requests in flight have finished its probes stop and it is forgotten.
func (p *Pool) retireLocked(n *Node) {
	if n.retired.Swap(true) {
		return
	}
	p.retiring[n] = struct{}{}
	if n.inflight.Load() == 0 {
		p.forgetLocked(n)
		return
	}
	go func() {
		t := time.NewTicker(50 * time.Millisecond)
		defer t.Stop()
		for n.inflight.Load() > 0 {
			<-t.C
		}
		p.mu.Lock()
		p.forgetLocked(n)
		p.mu.Unlock()
	}()
}

// forgetLocked drops a retired node: its loops, its metric series (unless
// another node has its name) and, through onRemove, what its owner keeps.
func (p *Pool) forgetLocked(n *Node) {
	delete(p.retiring, n)
	if cancel := p.loops[n]; cancel != nil {
		cancel()
		delete(p.loops, n)
	}
	p.unregisterNodeLocked(n.cfg.Name)
	if p.onRemove != nil {
		p.onRemove(n)
	}
}

func (p *Pool) conf() *Config { return &p.st.Load().cfg }

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

// Nodes returns every node in service, in configuration order
// (discovered nodes in address order within their entry).
func (p *Pool) Nodes() []*Node { return p.set.Load().nodes }

// Node returns the node in service called name, or nil.
func (p *Pool) Node(name string) *Node { return p.set.Load().byName[name] }

// Config returns the balancer configuration.
func (p *Pool) Config() Config { return p.st.Load().cfg }

// Resolve maps a requested model to the model to serve: an alias picks one
// of its weighted targets, deterministically for a given request id, so a
// retry keeps its target. ok is false for a model that is neither served nor
// an alias.
func (p *Pool) Resolve(model, requestID string) (string, bool) {
	ns := p.set.Load()
	targets, isAlias := ns.aliases[model]
	if !isAlias {
		return model, ns.served[model]
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
	ns := p.set.Load()
	for m := range ns.served {
		served = append(served, m)
	}
	for a := range ns.aliases {
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
	case n.drained.Load() || n.retired.Load():
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
	for _, n := range p.set.Load().byModel[model] {
		if v := n.admit(now); v == admitOK || v == admitFull || v == admitEjected {
			return true
		}
	}
	return false
}

// Ready reports whether at least one node is healthy and not drained.
func (p *Pool) Ready() bool {
	for _, n := range p.set.Load().nodes {
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
	q := p.set.Load().queues[model]
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
	for _, n := range p.set.Load().byModel[model] {
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
	n := p.Node(name)
	if n == nil {
		return fmt.Errorf("drain %q: %w", name, ErrUnknownNode)
	}
	n.drained.Store(true)
	return nil
}

// Undrain lets the node called name take requests again.
func (p *Pool) Undrain(name string) error {
	n := p.Node(name)
	if n == nil {
		return fmt.Errorf("undrain %q: %w", name, ErrUnknownNode)
	}
	if n.drained.Swap(false) {
		n.wake()
	}
	return nil
}
