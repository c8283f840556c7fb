package balancer

import (
	"context"
	"errors"
	"hash/fnv"
	"log/slog"
	"net/netip"
	"net/url"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"
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
	sessions  sessionTable            // each conversation's node (prefix weight > 0)

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
	// mismatchSeries is each node name's frontdoor_node_model_mismatch models.
	mismatchSeries map[string][]string
	wg             sync.WaitGroup

	predErr atomic.Pointer[metrics.PrometheusHistogram] // frontdoor_ttft_prediction_error_seconds; nil until RegisterMetrics
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
