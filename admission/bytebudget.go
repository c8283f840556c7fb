package admission

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"frontdoor/internal/telemetry"
)

// ByteBudget shares a number of bytes among the requests that hold memory
// at once (the gateway: the parsed bodies). A request takes its share with
// Acquire and gives it back with Release. Over the budget it waits up to
// the budget's wait for others to release, then is refused; a share
// larger than the whole budget is refused at once. Waiters are woken on
// every release and retry (no queue order: a large share may wait longer
// than small ones). Safe for concurrent use.
type ByteBudget struct {
	capacity atomic.Int64
	wait     atomic.Int64 // time.Duration

	mu     sync.Mutex
	used   int64
	change chan struct{} // closed and replaced on each release

	waits, refused, tooLarge atomic.Uint64
	waitsC, refusedC         atomic.Pointer[metrics.Counter]
	tooLargeC                atomic.Pointer[metrics.Counter]
}

// Errors of ByteBudget.Acquire.
var (
	// ErrBudgetFull: the budget stayed full for the whole wait.
	ErrBudgetFull = errors.New("byte budget full")
	// ErrOverBudget: the share is larger than the whole budget.
	ErrOverBudget = errors.New("share larger than the byte budget")
)

// NewByteBudget returns a budget of capacity bytes (> 0) whose requests
// wait up to wait for room.
func NewByteBudget(capacity int64, wait time.Duration) *ByteBudget {
	b := &ByteBudget{change: make(chan struct{})}
	b.Set(capacity, wait)
	return b
}

// Set changes the budget and the wait (a config reload). Shares taken
// stay taken: a smaller budget admits no one until enough are released.
func (b *ByteBudget) Set(capacity int64, wait time.Duration) {
	if b.capacity.Load() == capacity && b.wait.Load() == int64(wait) {
		return
	}
	b.capacity.Store(capacity)
	b.wait.Store(int64(max(wait, 0)))
	b.mu.Lock()
	close(b.change) // waiters look again
	b.change = make(chan struct{})
	b.mu.Unlock()
}

// Capacity is the budget in bytes.
func (b *ByteBudget) Capacity() int64 { return b.capacity.Load() }

// Acquire takes n bytes of the budget, waiting up to the budget's wait
// (or until ctx ends) for room. It returns ErrOverBudget when n exceeds
// the whole budget and ErrBudgetFull when no room came in time; the caller
// calls Release(n) after a nil error only.
func (b *ByteBudget) Acquire(ctx context.Context, n int64) error {
	if n > b.capacity.Load() {
		b.tooLarge.Add(1)
		inc(&b.tooLargeC)
		return ErrOverBudget
	}
	var timer *time.Timer
	counted := false
	for {
		b.mu.Lock()
		if b.used+n <= b.capacity.Load() {
			b.used += n
			b.mu.Unlock()
			if timer != nil {
				timer.Stop()
			}
			return nil
		}
		change := b.change
		b.mu.Unlock()
		if !counted {
			counted = true
			b.waits.Add(1)
			inc(&b.waitsC)
			wait := time.Duration(b.wait.Load())
			if wait == 0 {
				return b.refuse()
			}
			timer = time.NewTimer(wait)
		}
		select {
		case <-change:
		case <-timer.C:
			return b.refuse()
		case <-ctx.Done():
			timer.Stop()
			return b.refuse()
		}
	}
}

func (b *ByteBudget) refuse() error {
	b.refused.Add(1)
	inc(&b.refusedC)
	return ErrBudgetFull
}

// Release gives back n bytes taken by Acquire.
func (b *ByteBudget) Release(n int64) {
	b.mu.Lock()
	b.used -= n
	close(b.change)
	b.change = make(chan struct{})
	b.mu.Unlock()
}

// ByteBudgetStatus is a budget's state, for /status.
type ByteBudgetStatus struct {
	CapacityBytes int64  `json:"capacity_bytes"`
	InUseBytes    int64  `json:"in_use_bytes"`
	Waited        uint64 `json:"waited"`    // requests that found the budget full
	Refused       uint64 `json:"refused"`   // of those, refused after the wait
	TooLarge      uint64 `json:"too_large"` // refused at once: larger than the whole budget
}

// Status reports the budget's state.
func (b *ByteBudget) Status() ByteBudgetStatus {
	b.mu.Lock()
	used := b.used
	b.mu.Unlock()
	return ByteBudgetStatus{CapacityBytes: b.capacity.Load(), InUseBytes: used,
		Waited: b.waits.Load(), Refused: b.refused.Load(), TooLarge: b.tooLarge.Load()}
}

// ByteBudgetFamilies are the families a ByteBudget's series belong to;
// their user declares them, with help texts that say what the budget is.
type ByteBudgetFamilies struct {
	Bytes    telemetry.Family // gauge: bytes in use
	Capacity telemetry.Family // gauge: the budget
	Waits    telemetry.Family // counter: requests that found the budget full
	Refused  telemetry.Family // counter, by reason (full, too_large): requests refused
}

// RegisterMetrics exposes the budget in set, in the families f.
func (b *ByteBudget) RegisterMetrics(set *metrics.Set, f ByteBudgetFamilies) {
	f.Bytes.GetOrCreateGauge(set, func() float64 {
		b.mu.Lock()
		defer b.mu.Unlock()
		return float64(b.used)
	})
	f.Capacity.GetOrCreateGauge(set, func() float64 { return float64(b.capacity.Load()) })
	register := func(p *atomic.Pointer[metrics.Counter], c *metrics.Counter, n uint64) {
		c.Set(n)
		p.Store(c)
	}
	register(&b.waitsC, f.Waits.GetOrCreateCounter(set), b.waits.Load())
	register(&b.refusedC, f.Refused.GetOrCreateCounter(set, "reason", "full"), b.refused.Load())
	register(&b.tooLargeC, f.Refused.GetOrCreateCounter(set, "reason", "too_large"), b.tooLarge.Load())
}

func inc(p *atomic.Pointer[metrics.Counter]) {
	if c := p.Load(); c != nil {
		c.Inc()
	}
}
