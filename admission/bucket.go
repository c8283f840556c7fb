package admission

import (
	"math"
	"sync"
	"time"
)

// bucket is a token bucket on the admitter's clock (ns since its epoch).
// Its level may go below zero: reservations for waiting requests and
// settled usage beyond the estimate are debts paid back by the refill.
type bucket struct {
	rate  float64 // tokens per ns
	cap   float64
	level float64
	last  int64
}

func newBucket(perSecond, capacity float64) *bucket {
	return &bucket{rate: perSecond / 1e9, cap: capacity, level: capacity}
}

func (b *bucket) refill(now int64) {
	if now > b.last {
		b.level = min(b.cap, b.level+float64(now-b.last)*b.rate)
		b.last = now
	}
}

// shortfall is how long until cost can be taken (0: now). A cost above the
// capacity (in a fallback bucket, a share of the real quota, or a Bucket)
// needs a full bucket; the admitter's buckets are then left in debt.
func (b *bucket) shortfall(cost float64) time.Duration {
	need := min(cost, b.cap)
	if b.level >= need {
		return 0
	}
	return time.Duration(math.Ceil((need - b.level) / b.rate))
}

// add puts delta tokens back (or takes -delta), keeping the level within
// [-cap, cap].
func (b *bucket) add(delta float64) {
	b.level = min(b.cap, max(-b.cap, b.level+delta))
}

// Bucket is a token bucket for callers outside the Admitter (the
// spill-over's local mirror of a hosted API's quota): rate tokens a second,
// at most burst, full at the start. Unlike the Admitter's buckets it never
// goes into debt: Take takes nothing when it would have to wait. Safe for
// concurrent use.
type Bucket struct {
	mu  sync.Mutex
	b   *bucket
	now func() int64 // ns since the bucket was made; replaced in tests
}

// NewBucket returns a full bucket of burst tokens that refills at rate
// tokens a second. rate and burst must be > 0.
func NewBucket(rate, burst float64) *Bucket {
	start := time.Now()
	return &Bucket{b: newBucket(rate, burst), now: func() int64 { return int64(time.Since(start)) }}
}

// Take removes n tokens and returns 0, or, when fewer than n are there,
// removes none and returns the wait until n would be. An n above burst
// counts as burst: a request larger than the whole budget takes all of it.
func (b *Bucket) Take(n float64) time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.b.refill(b.now())
	if w := b.b.shortfall(n); w > 0 {
		return w
	}
	b.b.level -= min(n, b.b.cap)
	return 0
}

// Refund puts n tokens back (one taken for a request that did not go),
// up to burst.
func (b *Bucket) Refund(n float64) {
	b.mu.Lock()
	b.b.add(n)
	b.mu.Unlock()
}

// Drain empties the bucket (the quota's owner said it is spent); it
// refills from now on.
func (b *Bucket) Drain() {
	b.mu.Lock()
	b.b.refill(b.now())
	b.b.level = 0
	b.mu.Unlock()
}
