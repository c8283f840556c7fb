package cache

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"frontdoor/internal/units"
)

// BreakerState is the state of a Breaker.
type BreakerState int32

// States of a Breaker.
const (
	BreakerClosed BreakerState = iota
	BreakerOpen
	BreakerHalfOpen
)

func (s BreakerState) String() string {
	switch s {
	case BreakerOpen:
		return "open"
	case BreakerHalfOpen:
		return "half_open"
	}
	return "closed"
}

// BreakerConfig is a breaker: section (cache.reads.breaker,
// cache.writes.breaker).
type BreakerConfig struct {
	// FailureRatio opens the breaker when at least this share of the calls
	// in Window failed...
	FailureRatio float64 `yaml:"failure_ratio"`
	// ...and at least MinCalls calls were made in Window, so that a burst of
	// timeouts in one stall of a busy store does not open it.
	MinCalls int            `yaml:"min_calls"`
	Window   units.Duration `yaml:"window"`
	// OpenFor is how long an open breaker refuses calls before it lets one
	// probe through.
	OpenFor units.Duration `yaml:"open_for"`
}

// Validate checks the section.
func (c BreakerConfig) Validate() error {
	var errs []error
	if c.FailureRatio <= 0 || c.FailureRatio > 1 {
		errs = append(errs, errors.New("failure_ratio: must be in (0, 1]"))
	}
	if c.MinCalls < 1 {
		errs = append(errs, errors.New("min_calls: must be >= 1"))
	}
	if c.Window < units.Duration(breakerBuckets*time.Millisecond) {
		errs = append(errs, fmt.Errorf("window: must be >= %dms", breakerBuckets))
	}
	if c.OpenFor <= 0 {
		errs = append(errs, errors.New("open_for: must be > 0"))
	}
	return errors.Join(errs...)
}

// breakerBuckets is how many slices the window is counted in.
const breakerBuckets = 10

// Breaker is a circuit breaker for calls to a remote store. It counts calls
// and failures over a sliding window (in ten slices) and opens when the
// failure ratio and the number of calls both reach their thresholds. Open,
// it refuses calls for OpenFor, then lets one probe through (half-open): the
// probe's success closes it, its failure opens it again. A probe that never
// reports is replaced after another OpenFor. Safe for concurrent use; every
// method takes one uncontended mutex, which costs nothing next to a network
// round trip.
type Breaker struct {
	cfg      BreakerConfig
	slice    int64            // ns per bucket
	now      func() time.Time // settable in tests
	onChange func(from, to BreakerState)

	mu       sync.Mutex
	state    BreakerState
	since    time.Time
	openedAt int64 // unix ns, while open
	probeAt  int64 // unix ns the probe was let through, while half-open
	calls    [breakerBuckets]int64
	fails    [breakerBuckets]int64
	epoch    [breakerBuckets]int64 // the slice number each bucket counts
}

// NewBreaker returns a closed breaker. onChange, when not nil, is called
// after every state change, outside the breaker's lock.
func NewBreaker(cfg BreakerConfig, onChange func(from, to BreakerState)) *Breaker {
	b := &Breaker{cfg: cfg, slice: max(int64(cfg.Window)/breakerBuckets, 1), now: time.Now, onChange: onChange}
	b.since = b.now()
	return b
}

// Allow reports whether a call may go ahead: always while closed, never while
// open, and once (the probe) when OpenFor has passed.
func (b *Breaker) Allow() bool {
	b.mu.Lock()
	now := b.now()
	ns := now.UnixNano()
	var changed bool
	ok := true
	switch b.state {
	case BreakerOpen:
		ok = ns-b.openedAt >= int64(b.cfg.OpenFor)
		if ok {
			b.probeAt = ns
			changed = b.set(BreakerHalfOpen, now)
		}
	case BreakerHalfOpen:
		ok = ns-b.probeAt >= int64(b.cfg.OpenFor)
		if ok {
			b.probeAt = ns
		}
	}
	b.mu.Unlock()
	if changed {
		b.notify(BreakerOpen, BreakerHalfOpen)
	}
	return ok
}

// Success reports a call that worked. In half-open it closes the breaker.
func (b *Breaker) Success() { b.report(false) }

// Failure reports a call that failed. It opens a closed breaker whose window
// reaches both thresholds, and re-opens a half-open one.
func (b *Breaker) Failure() { b.report(true) }

func (b *Breaker) report(failed bool) {
	b.mu.Lock()
	now := b.now()
	from := b.state
	var changed bool
	switch b.state {
	case BreakerClosed:
		calls, fails := b.count(now.UnixNano(), failed)
		if failed && calls >= int64(b.cfg.MinCalls) && float64(fails) >= b.cfg.FailureRatio*float64(calls) {
			changed = b.open(now)
		}
	case BreakerHalfOpen:
		if failed {
			changed = b.open(now)
		} else {
			b.calls, b.fails = [breakerBuckets]int64{}, [breakerBuckets]int64{}
			changed = b.set(BreakerClosed, now)
		}
	}
	// Open: a late report of a call made before opening changes nothing.
	to := b.state
	b.mu.Unlock()
	if changed {
		b.notify(from, to)
	}
}

// count adds one call to the current slice and returns the window's totals.
func (b *Breaker) count(ns int64, failed bool) (calls, fails int64) {
	cur := ns / b.slice
	i := cur % breakerBuckets
	if b.epoch[i] != cur {
		b.epoch[i], b.calls[i], b.fails[i] = cur, 0, 0
	}
	b.calls[i]++
	if failed {
		b.fails[i]++
	}
	for j := range b.calls {
		if cur-b.epoch[j] < breakerBuckets {
			calls += b.calls[j]
			fails += b.fails[j]
		}
	}
	return calls, fails
}

func (b *Breaker) open(now time.Time) bool {
	b.openedAt = now.UnixNano()
	b.calls, b.fails = [breakerBuckets]int64{}, [breakerBuckets]int64{}
	return b.set(BreakerOpen, now)
}

func (b *Breaker) set(s BreakerState, now time.Time) bool {
	if b.state == s {
		return false
	}
	b.state, b.since = s, now
	return true
}

func (b *Breaker) notify(from, to BreakerState) {
	if b.onChange != nil {
		b.onChange(from, to)
	}
}

// State returns the current state and when it began.
func (b *Breaker) State() (BreakerState, time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.state, b.since
}
