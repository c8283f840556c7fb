package cache

import (
	"sync"
	"sync/atomic"
	"time"
)

const (
	breakerClosed int32 = iota
	breakerOpen
	breakerHalfOpen
)

// Breaker is a circuit breaker for calls to a remote store. It opens after
// `failures` failures within `window`, refuses calls for `openFor`, then lets
// one probe through (half-open): the probe's success closes it, its failure
// opens it again. A probe that never reports is replaced after another
// openFor. The closed path of Allow and Success is one atomic load; the
// mutex is taken on failures and transitions only. Safe for concurrent use.
type Breaker struct {
	failures int
	window   time.Duration
	openFor  time.Duration
	now      func() time.Time // settable in tests

	state    atomic.Int32
	openedAt atomic.Int64 // unix ns, while open
	probeAt  atomic.Int64 // unix ns the probe was let through, while half-open

	mu     sync.Mutex
	fails  []int64 // ring of the latest failure times (unix ns)
	next   int
	filled int
}

// NewBreaker returns a closed breaker. failures < 1 counts as 1.
func NewBreaker(failures int, window, openFor time.Duration) *Breaker {
	failures = max(failures, 1)
	return &Breaker{failures: failures, window: window, openFor: openFor, now: time.Now, fails: make([]int64, failures)}
}

// Allow reports whether a call may go ahead: always while closed, never while
// open, and once (the probe) when openFor has passed.
func (b *Breaker) Allow() bool {
	switch b.state.Load() {
	case breakerClosed:
		return true
	case breakerOpen:
		now := b.now().UnixNano()
		if now-b.openedAt.Load() < int64(b.openFor) {
			return false
		}
		b.mu.Lock()
		defer b.mu.Unlock()
		switch b.state.Load() {
		case breakerClosed:
			return true
		case breakerOpen:
			if now-b.openedAt.Load() < int64(b.openFor) {
				return false
			}
			b.probeAt.Store(now)
			b.state.Store(breakerHalfOpen)
			return true
		}
		return false // another caller is the probe
	default: // half-open
		p := b.probeAt.Load()
		now := b.now().UnixNano()
		return now-p >= int64(b.openFor) && b.probeAt.CompareAndSwap(p, now)
	}
}

// Success reports a call that worked. In half-open it closes the breaker.
func (b *Breaker) Success() {
	if b.state.Load() != breakerHalfOpen {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.state.Load() == breakerHalfOpen {
		b.next, b.filled = 0, 0
		b.state.Store(breakerClosed)
	}
}

// Failure reports a call that failed. It opens a closed breaker on the
// failures-th failure within window, and re-opens a half-open one.
func (b *Breaker) Failure() {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.now().UnixNano()
	switch b.state.Load() {
	case breakerClosed:
		b.fails[b.next] = now
		b.next = (b.next + 1) % len(b.fails)
		b.filled = min(b.filled+1, len(b.fails))
		// fails[next] is now the oldest of the latest `failures` failures.
		if b.filled == len(b.fails) && now-b.fails[b.next] < int64(b.window) {
			b.open(now)
		}
	case breakerHalfOpen:
		b.open(now)
	}
	// Open: a late report of a call made before opening changes nothing.
}

func (b *Breaker) open(now int64) {
	b.openedAt.Store(now)
	b.next, b.filled = 0, 0
	b.state.Store(breakerOpen)
}

// State returns "closed", "open" or "half_open".
func (b *Breaker) State() string {
	switch b.state.Load() {
	case breakerOpen:
		return "open"
	case breakerHalfOpen:
		return "half_open"
	}
	return "closed"
}
