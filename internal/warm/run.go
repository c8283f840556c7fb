package warm

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"
)

// Result is what happened to one item that did not fail.
type Result int

// Results of an item.
const (
	Warmed  Result = iota // sent upstream (or imported) and stored
	Cached                // already cached: nothing was sent upstream
	Pending               // dry run: not cached, would be warmed
)

// Target is where a warm-up goes: a gateway over HTTP, or the gateway
// itself.
type Target interface {
	// Lookup reports whether the item's request is answered from the cache
	// (exact only for answered pairs), without ever calling upstream.
	Lookup(ctx context.Context, it *Item) (bool, error)
	// Warm sends the item's request through the gateway (KindRequest) or
	// imports its answer (KindPair). It returns Cached when the gateway
	// answered from the cache after all.
	Warm(ctx context.Context, it *Item) (Result, error)
}

// Options shape a run.
type Options struct {
	Concurrency int           // requests in flight at most; default 5
	RPS         float64       // items started per second at most; 0: no limit
	DryRun      bool          // look up only: count what is cached and what would be warmed
	Timeout     time.Duration // per call; default 5 minutes
	// OnProgress, if set, is called after every item, from the workers:
	// it must be quick and safe for concurrent use.
	OnProgress func(Progress)
}

// Progress is a snapshot of a run.
type Progress struct {
	Total   int64     `json:"total"`
	Done    int64     `json:"done"`
	Warmed  int64     `json:"warmed"`
	Cached  int64     `json:"already_cached"`
	Pending int64     `json:"would_warm,omitempty"` // dry run
	Failed  int64     `json:"failed"`
	Started time.Time `json:"started"`
}

// Failure is one item that failed, for the report.
type Failure struct {
	File  string `json:"file"`
	Line  int    `json:"line"`
	Error string `json:"error"`
}

// Summary is the outcome of a run.
type Summary struct {
	Progress
	Failures    []Failure `json:"failures,omitempty"`
	Interrupted bool      `json:"interrupted,omitempty"` // ctx ended before every item started
}

// Counter keeps a run's counts; the zero value is ready.
type counter struct {
	total, done, warmed, cached, pending, failed atomic.Int64
	started                                      time.Time
}

func (c *counter) snapshot() Progress {
	return Progress{Total: c.total.Load(), Done: c.done.Load(), Warmed: c.warmed.Load(), Cached: c.cached.Load(),
		Pending: c.pending.Load(), Failed: c.failed.Load(), Started: c.started}
}

// Run warms items into t: each item is looked up first and sent (or
// imported) only when not cached, so a re-run costs no GPU time. When ctx
// ends no further item starts; those in flight finish (within
// Options.Timeout), so that a re-run resumes where this one stopped.
func Run(ctx context.Context, items []Item, t Target, o Options) Summary {
	if o.Concurrency < 1 {
		o.Concurrency = 5
	}
	if o.Timeout <= 0 {
		o.Timeout = 5 * time.Minute
	}
	var lim *rate.Limiter
	if o.RPS > 0 {
		lim = rate.NewLimiter(rate.Limit(o.RPS), 1)
	}
	c := &counter{started: time.Now()}
	c.total.Store(int64(len(items)))
	var (
		mu       sync.Mutex
		failures []Failure
	)
	report := func() {
		if o.OnProgress != nil {
			o.OnProgress(c.snapshot())
		}
	}
	fail := func(it *Item, err error) {
		c.failed.Add(1)
		mu.Lock()
		failures = append(failures, Failure{File: it.File, Line: it.Line, Error: err.Error()})
		mu.Unlock()
	}
	work := make(chan *Item)
	var wg sync.WaitGroup
	for range o.Concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for it := range work {
				// In flight, an item finishes even after an interrupt.
				cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), o.Timeout)
				res, err := one(cctx, t, it, o.DryRun)
				cancel()
				switch {
				case err != nil:
					fail(it, err)
				case res == Warmed:
					c.warmed.Add(1)
				case res == Cached:
					c.cached.Add(1)
				case res == Pending:
					c.pending.Add(1)
				}
				c.done.Add(1)
				report()
			}
		}()
	}
	interrupted := false
	report()
	for i := range items {
		it := &items[i]
		if it.Err != nil { // malformed: reported, never sent, costs no rate
			fail(it, it.Err)
			c.done.Add(1)
			report()
			continue
		}
		if lim != nil && lim.Wait(ctx) != nil {
			interrupted = true
			break
		}
		select {
		case work <- it:
			continue
		case <-ctx.Done():
			interrupted = true
		}
		break
	}
	close(work)
	wg.Wait()
	report()
	s := Summary{Progress: c.snapshot(), Failures: failures, Interrupted: interrupted}
	return s
}

func one(ctx context.Context, t Target, it *Item, dry bool) (Result, error) {
	cached, err := t.Lookup(ctx, it)
	switch {
	case err != nil:
		return 0, err
	case cached:
		return Cached, nil
	case dry:
		return Pending, nil
	}
	return t.Warm(ctx, it)
}
