package balancer

import (
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"
)

// Node is one GPU node as the balancer sees it. Everything the picker reads
// on the hot path is an atomic; the breaker and ejection bookkeeping sit
// behind a mutex that only failures, half-open probes and scrapes take.
type Node struct {
	p          *Pool
	cfg        NodeConfig
	kind       engineKind
	models     map[string]bool
	queues     []*slotQueue // one per served model, woken by Release
	healthURL  string
	metricsURL string
	seed       uint64 // rendezvous-hash seed, from the name
	entry      string // the discover entry it came from, or ""
	// The URLs as shown and logged: user information masked.
	shownURL, shownHealthURL, shownMetricsURL string
	// Where the engine lists its models ("" for kind openai), as shown,
	// and the Authorization header it needs ("" none).
	modelsURL, shownModelsURL, modelsAuth string

	inflight  atomic.Int64
	healthy   atomic.Bool
	drained   atomic.Bool
	retired   atomic.Bool // left the node set: drains, then is forgotten
	ejected   atomic.Bool
	brState   atomic.Uint32 // breakerClosed, breakerOpen or breakerHalfOpen
	openUntil atomic.Int64  // unix ns; while open, no request before it

	scraped    atomic.Pointer[engineMetrics] // nil until the first good scrape
	slots      atomic.Uint64                 // float64 bits: running seen while the engine queued (its real batch size); 0 = not seen
	ttft       ewma                          // seconds to the first byte
	prefix     prefixIndex                   // prefix blocks routed here (prefix weight > 0)
	kvCapacity atomic.Int64                  // KV capacity in tokens the engine publishes; 0 = unknown
	prefixHits atomic.Uint64                 // float64 bits: the engine's prefix-cache hit rate over the last scrape interval with queries; 0 bits = unknown
	tpot       ewma                          // seconds per output token
	pred       ttftModel                     // the TTFT predictor (predict.go)
	served     atomic.Pointer[servedCheck]   // the last models check; nil: not checked (served.go)
	checking   sync.Mutex                    // one models check at a time, its verdict and log lines together

	requests [3]atomic.Uint64 // by Outcome
	mReq     [3]atomic.Pointer[metrics.Counter]
	mTTFT    atomic.Pointer[metrics.PrometheusHistogram]

	mu         sync.Mutex // guards br, ej, scrapeErr, probeErr, probeFails, probedOK, downLogged, downQuiet, downInLog, modelsNoted
	br         breaker
	ej         ejection
	scrapeErr  string
	probeErr   string
	probeFails int       // failed probes in a row
	probedOK   bool      // it has passed a probe
	downLogged time.Time // when the last "node unhealthy" line was written
	downQuiet  int       // times it turned unhealthy since, not logged
	downInLog  bool      // its current outage was logged
	// modelsNoted: that its models endpoint gives no list was logged.
	modelsNoted bool
}

// Name returns the node's configured name.
func (n *Node) Name() string { return n.cfg.Name }

// Config returns the node's configuration (defaults filled in).
func (n *Node) Config() NodeConfig { return n.cfg }

// Inflight returns the requests this gateway has in flight on the node.
func (n *Node) Inflight() int64 { return n.inflight.Load() }

// Healthy reports the last health verdict: the active probe, or a failure
// on an otherwise idle node since that probe.
func (n *Node) Healthy() bool { return n.healthy.Load() }

// Drained reports whether the node takes no new requests.
func (n *Node) Drained() bool { return n.drained.Load() }

// Ejected reports whether the node is ejected for overload.
func (n *Node) Ejected() bool { return n.ejected.Load() }

// Serves reports whether the node serves model.
func (n *Node) Serves(model string) bool { return n.models[model] }

// TryAcquire takes an in-flight slot if the node is below its cap and its
// breaker lets a request through (half-open: a limited number of trial
// requests). Every successful call must be paired with exactly one Release,
// and should be followed by one Report.
func (n *Node) TryAcquire() bool {
	if n.retired.Load() {
		return false
	}
	probe := false
	if n.brState.Load() != breakerClosed {
		if !n.takeProbe() {
			return false
		}
		probe = true
	}
	limit := int64(n.cfg.MaxConcurrency)
	for {
		cur := n.inflight.Load()
		if cur >= limit {
			if probe {
				n.returnProbe()
			}
			return false
		}
		if n.inflight.CompareAndSwap(cur, cur+1) {
			return true
		}
	}
}

// Release gives back a slot taken by TryAcquire and wakes WaitForSlot.
func (n *Node) Release() {
	n.inflight.Add(-1)
	for _, q := range n.queues {
		if q.waiters.Load() > 0 {
			q.signal()
		}
	}
}

// wake tells waiters that the node may have become usable.
func (n *Node) wake() {
	for _, q := range n.queues {
		if q.waiters.Load() > 0 {
			q.signal()
		}
	}
}

// ewma is a lock-free exponentially weighted moving average of seconds.
// Zero bits mean no sample yet.
type ewma struct {
	bits atomic.Uint64
	at   atomic.Int64 // unix ns of the last sample
}

const ewmaAlpha = 0.2

func (e *ewma) observe(v float64, now int64) {
	v = max(v, 1e-9)
	for {
		old := e.bits.Load()
		nv := v
		if old != 0 {
			nv = ewmaAlpha*v + (1-ewmaAlpha)*math.Float64frombits(old)
		}
		if e.bits.CompareAndSwap(old, math.Float64bits(nv)) {
			break
		}
	}
	e.at.Store(now)
}

// get returns the average and the time of the last sample; ok is false
// before the first sample.
func (e *ewma) get() (v float64, at int64, ok bool) {
	b := e.bits.Load()
	if b == 0 {
		return 0, 0, false
	}
	return math.Float64frombits(b), e.at.Load(), true
}

// Breaker states.
const (
	breakerClosed uint32 = iota
	breakerOpen
	breakerHalfOpen
)

var breakerNames = [...]string{"closed", "open", "half_open"}

// breaker is the per-node circuit breaker's bookkeeping (under Node.mu).
type breaker struct {
	fails     []int64 // ring of the last `failures` failure times
	next      int
	count     int
	probes    int   // half-open trial requests in flight
	probeAt   int64 // when the last trial started
	successes int   // consecutive half-open successes
	opens     int   // times opened
	openedAt  int64
}

// breakerAllows reports whether the breaker lets a request through now,
// without taking a trial slot: closed, or half-open (or open and due to
// become half-open) with a trial slot free.
func (n *Node) breakerAllows(now int64) bool {
	switch n.brState.Load() {
	case breakerClosed:
		return true
	case breakerOpen:
		if now < n.openUntil.Load() {
			return false
		}
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	n.halfOpenIfDueLocked(now)
	return n.brState.Load() == breakerHalfOpen && n.probeFreeLocked(now)
}

func (n *Node) halfOpenIfDueLocked(now int64) {
	if n.brState.Load() == breakerOpen && now >= n.openUntil.Load() {
		n.br.probes, n.br.successes = 0, 0
		n.brState.Store(breakerHalfOpen)
	}
}

// probeFreeLocked reports whether a trial slot is free. A trial whose
// result never came back frees its slot after open_for.
func (n *Node) probeFreeLocked(now int64) bool {
	if n.br.probes > 0 && now-n.br.probeAt >= int64(n.p.conf().Breaker.OpenFor) {
		n.br.probes = 0
	}
	return n.br.probes < n.p.st.Load().halfOpenProbes
}

func (n *Node) takeProbe() bool {
	now := n.p.nowNanos()
	n.mu.Lock()
	defer n.mu.Unlock()
	n.halfOpenIfDueLocked(now)
	switch n.brState.Load() {
	case breakerClosed: // closed meanwhile
		return true
	case breakerHalfOpen:
		if n.probeFreeLocked(now) {
			n.br.probes++
			n.br.probeAt = now
			return true
		}
	}
	return false
}

func (n *Node) returnProbe() {
	n.mu.Lock()
	if n.br.probes > 0 {
		n.br.probes--
	}
	n.mu.Unlock()
}

// recordLocked feeds one outcome to the breaker. Any result that arrives
// while half-open counts as a trial result.
func (n *Node) recordLocked(o Outcome, now int64) {
	cfg := n.p.conf().Breaker
	state := n.brState.Load()
	if state == breakerHalfOpen && n.br.probes > 0 {
		n.br.probes--
	}
	switch o {
	case OutcomeFailure:
		switch state {
		case breakerHalfOpen:
			n.openLocked(now)
		case breakerClosed:
			if len(n.br.fails) != cfg.Failures {
				n.br.fails = make([]int64, cfg.Failures)
			}
			n.br.fails[n.br.next] = now
			n.br.next = (n.br.next + 1) % cfg.Failures
			n.br.count = min(n.br.count+1, cfg.Failures)
			// The ring is full: its oldest entry is the failures-th most
			// recent failure.
			if n.br.count == cfg.Failures && now-n.br.fails[n.br.next] <= int64(cfg.Window) {
				n.openLocked(now)
			}
		}
	case OutcomeSuccess:
		if state == breakerHalfOpen {
			n.br.successes++
			if n.br.successes >= cfg.HalfOpenSuccesses {
				n.br.count, n.br.next, n.br.successes, n.br.probes = 0, 0, 0, 0
				n.brState.Store(breakerClosed)
				n.wake()
			}
		}
	}
}

func (n *Node) openLocked(now int64) {
	n.br.count, n.br.next, n.br.successes, n.br.probes = 0, 0, 0, 0
	n.br.opens++
	n.br.openedAt = now
	n.openUntil.Store(now + int64(n.p.conf().Breaker.OpenFor))
	n.brState.Store(breakerOpen)
}

// breakerStateAt is the breaker state as of now (open becomes half-open
// once open_for has passed).
func (n *Node) breakerStateAt(now int64) uint32 {
	s := n.brState.Load()
	if s == breakerOpen && now >= n.openUntil.Load() {
		return breakerHalfOpen
	}
	return s
}

// ejection is the overload-ejection bookkeeping (under Node.mu).
type ejection struct {
	bad    int   // consecutive scrapes over a threshold
	good   int   // consecutive scrapes clearly under, while ejected
	since  int64 // when ejected
	count  int   // times ejected
	reason string
}

// ejectMargin is the hysteresis band: an ejected node comes back only once
// its KV usage is this far below kv_usage_above (and its queue at most half
// of queue_above), so a node hovering at the threshold stays out instead of
// flapping in and out.
const ejectMargin = 0.05

// evaluateEjection runs once per successful scrape. A scrape without the
// needed metrics is no evidence either way and changes nothing.
func (n *Node) evaluateEjection(m *engineMetrics, now int64) {
	cfg := n.p.conf().Eject
	kvKnown, qKnown := !math.IsNaN(m.kv), !math.IsNaN(m.waiting) && cfg.QueueAbove > 0
	if !kvKnown && !qKnown {
		return
	}
	over, reason := false, ""
	if kvKnown && m.kv > cfg.KVUsageAbove {
		over, reason = true, "kv_usage_above"
	} else if qKnown && m.waiting > cfg.QueueAbove {
		over, reason = true, "queue_above"
	}
	clear := (!kvKnown || m.kv <= cfg.KVUsageAbove-ejectMargin) && (!qKnown || m.waiting <= cfg.QueueAbove/2)

	n.mu.Lock()
	defer n.mu.Unlock()
	e := &n.ej
	if !n.ejected.Load() {
		if !over {
			e.bad = 0
			return
		}
		e.bad++
		if e.bad >= cfg.After {
			e.bad, e.good = 0, 0
			e.since, e.reason = now, reason
			e.count++
			n.ejected.Store(true)
		}
		return
	}
	if !clear {
		e.good = 0
		return
	}
	e.good++
	if e.good >= cfg.RestoreAfter && now-e.since >= int64(cfg.Cooldown) {
		e.bad, e.good, e.reason = 0, 0, ""
		n.ejected.Store(false)
		n.wake()
	}
}

// slotQueue wakes WaitForSlot callers for one model when a slot frees.
type slotQueue struct {
	waiters atomic.Int32
	mu      sync.Mutex
	ch      chan struct{}
}

func newSlotQueue() *slotQueue { return &slotQueue{ch: make(chan struct{})} }

func (q *slotQueue) wait() <-chan struct{} {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.ch
}

func (q *slotQueue) signal() {
	q.mu.Lock()
	close(q.ch)
	q.ch = make(chan struct{})
	q.mu.Unlock()
}
