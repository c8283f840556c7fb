package cache

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// BackendState says what the cache does with its store.
type BackendState string

// States of a Backend.
const (
	StateOK       BackendState = "ok"       // lookups and writes work
	StateDegraded BackendState = "degraded" // lookups work; writes fail, are dropped, or lookups fail now and then
	StateBypassed BackendState = "bypassed" // lookups skip the store: not connected, or the read breaker is open
)

// troubleMemory is how long a failed or dropped call keeps a backend
// degraded.
const troubleMemory = 30 * time.Second

// Errors of a Backend.
var (
	// ErrBypassed means the read breaker refused the lookup.
	ErrBypassed = errors.New("cache: store bypassed (read breaker open)")
	// ErrDropped means a write was not stored; see WriteDropped's reason.
	ErrDropped = errors.New("cache: write dropped")
)

// Reasons a write is dropped, as WriteDropped reports them.
const (
	DropQueueFull   = "queue_full"
	DropBreakerOpen = "breaker_open"
	DropShutdown    = "shutdown"
)

// Observer sees what a Backend does, for metrics and logs. Its methods are
// called from many goroutines and must not block.
type Observer interface {
	// Lookup reports one store call on the request path: op is "get" or
	// "search"; err is nil for a hit or ErrNotFound.
	Lookup(op string, d time.Duration, err error)
	// WriteBatch reports one batch of n writes sent to the store.
	WriteBatch(n int, d time.Duration, err error)
	// WriteDropped reports n writes that were not sent.
	WriteDropped(reason string, n int)
	// BreakerChanged reports a breaker's transition; path is "read",
	// "write" or "embed", lastErr the path's latest error (nil if none yet,
	// and for "embed").
	BreakerChanged(path string, from, to BreakerState, lastErr error)
	// EmbedSkipped reports a request that skips the semantic cache because
	// the embedder failed with err, or (err nil) its breaker is open.
	EmbedSkipped(err error)
	// StateChanged reports a change of the backend's state, with why.
	StateChanged(from, to BackendState, why string)
}

// Write is one answer to store.
type Write struct {
	Entry *Entry
	Vec   []float32 // nil: exact only
	// Query, optional, is Vec as the lookup prepared and searched it: a
	// store with a local index reuses its codes and list ranking.
	Query *VecQuery
	TTL   time.Duration
}

// query returns w's prepared query when it is for w.Vec, else a new one.
func (w *Write) query() *VecQuery {
	if q := w.Query; q != nil && len(q.vec) == len(w.Vec) && len(w.Vec) > 0 && &q.vec[0] == &w.Vec[0] {
		return q
	}
	return NewVecQuery(w.Vec)
}

// BatchPutter is a Store that stores several writes in one round trip.
type BatchPutter interface {
	PutBatch(ctx context.Context, ws []Write) error
}

// readiness is a Store that may not be connected yet (LazyStore).
type readiness interface{ Ready() bool }

// Backend puts a Store behind what the request path needs: lookups with a
// short timeout behind a read breaker, and a write-back that never blocks a
// request: a bounded queue drained by workers in pipelined batches, behind a
// breaker of its own, so that slow or failing writes never switch lookups
// off. It tracks its state (ok, degraded, bypassed) and reports every change
// to its Observer.
type Backend struct {
	store  Store
	reads  ReadsConfig
	writes WritesConfig
	obs    Observer

	readBreaker, writeBreaker *Breaker
	embedder                  *guardedEmbedder // nil: none (UseEmbedder)

	mu     sync.RWMutex // guards closed against sends on queue
	closed bool
	queue  chan writeJob
	wg     sync.WaitGroup
	drain  chan struct{} // closed when Close's deadline passes: drop the rest

	lastReadErr, lastWriteErr, lastDrop atomic.Int64 // unix ns
	readErr, writeErr                   atomic.Pointer[error]

	stateMu    sync.Mutex
	state      BackendState
	stateSince time.Time
	stop       chan struct{}
	ticker     sync.WaitGroup
}

type writeJob struct {
	w    Write
	done func(error)
}

// NewBackend starts the backend's workers over store. obs may be nil.
func NewBackend(store Store, reads ReadsConfig, writes WritesConfig, obs Observer) *Backend {
	if obs == nil {
		obs = nopObserver{}
	}
	b := &Backend{store: store, reads: reads, writes: writes, obs: obs,
		queue: make(chan writeJob, writes.Queue), drain: make(chan struct{}), stop: make(chan struct{}),
		state: StateOK, stateSince: time.Now()}
	b.readBreaker = NewBreaker(reads.Breaker, func(from, to BreakerState) { b.breakerChanged("read", from, to) })
	b.writeBreaker = NewBreaker(writes.Breaker, func(from, to BreakerState) { b.breakerChanged("write", from, to) })
	for range max(writes.Workers, 1) {
		b.wg.Add(1)
		go b.worker()
	}
	b.ticker.Add(1)
	go b.watch()
	return b
}

// Get looks an exact key up. (nil, nil) is a miss.
func (b *Backend) Get(ctx context.Context, key string) (*Entry, error) {
	var e *Entry
	err := b.read(ctx, "get", func(ctx context.Context) (err error) {
		e, err = b.store.Get(ctx, key)
		return err
	})
	if errors.Is(err, ErrNotFound) {
		return nil, nil
	}
	return e, err
}

// GetMany looks several exact keys up in one read (one timeout, one
// breaker call): the entry under each key, nil for a miss.
func (b *Backend) GetMany(ctx context.Context, keys []string) ([]*Entry, error) {
	var es []*Entry
	err := b.read(ctx, "get", func(ctx context.Context) (err error) {
		es, err = getAll(ctx, b.store, keys)
		return err
	})
	return es, err
}

// Search returns up to k entries of scope, most similar first.
func (b *Backend) Search(ctx context.Context, scope string, vec []float32, k int) ([]Match, error) {
	var m []Match
	err := b.read(ctx, "search", func(ctx context.Context) (err error) {
		m, err = b.store.Search(ctx, scope, vec, k)
		return err
	})
	return m, err
}

// SearchQuery returns up to k entries of scope of similarity at least
// minSim, most similar first (QuerySearcher).
func (b *Backend) SearchQuery(ctx context.Context, scope string, q *VecQuery, k int, minSim float32) ([]Match, error) {
	var m []Match
	err := b.read(ctx, "search", func(ctx context.Context) (err error) {
		m, err = searchQuery(ctx, b.store, scope, q, k, minSim)
		return err
	})
	return m, err
}

func (b *Backend) read(ctx context.Context, op string, call func(context.Context) error) error {
	if !b.readBreaker.Allow() {
		return ErrBypassed
	}
	ctx, cancel := context.WithTimeout(ctx, b.reads.Timeout.D())
	defer cancel()
	start := time.Now()
	err := call(ctx)
	b.obs.Lookup(op, time.Since(start), err)
	switch {
	case err == nil || errors.Is(err, ErrNotFound):
		b.readBreaker.Success()
	case errors.Is(err, ErrUnavailable):
		// Not connected yet: the state says bypassed; nothing to count.
	default:
		b.lastReadErr.Store(time.Now().UnixNano())
		b.readErr.Store(&err)
		b.readBreaker.Failure()
		return fmt.Errorf("cache: %s: %w", op, err)
	}
	return err
}

// Enqueue hands a write to the workers and returns at once. done (optional)
// is called exactly once: with the store's answer, or with an error wrapping
// ErrDropped when the queue is full, the write breaker is open or the
// backend is closing.
func (b *Backend) Enqueue(w Write, done func(error)) {
	if done == nil {
		done = func(error) {}
	}
	// done runs after the lock is released: it may enqueue again.
	if reason := b.enqueue(writeJob{w: w, done: done}); reason != "" {
		b.dropped(reason, 1)
		done(fmt.Errorf("%w: %s", ErrDropped, reason))
	}
}

// enqueue queues j; it returns why it could not ("": queued).
func (b *Backend) enqueue(j writeJob) string {
	b.mu.RLock()
	defer b.mu.RUnlock()
	if b.closed {
		return DropShutdown
	}
	select {
	case b.queue <- j:
		return ""
	default:
		return DropQueueFull
	}
}

func (b *Backend) dropped(reason string, n int) {
	b.lastDrop.Store(time.Now().UnixNano())
	b.obs.WriteDropped(reason, n)
}

// worker drains the queue in batches until it is closed and empty.
func (b *Backend) worker() {
	defer b.wg.Done()
	batch := make([]writeJob, 0, b.writes.Batch)
	for job := range b.queue {
		batch = append(batch[:0], job)
	fill:
		for len(batch) < b.writes.Batch {
			select {
			case j, ok := <-b.queue:
				if !ok {
					break fill
				}
				batch = append(batch, j)
			default:
				break fill
			}
		}
		b.flush(batch)
		clear(batch)
	}
}

func (b *Backend) flush(batch []writeJob) {
	finish := func(err error) {
		for _, j := range batch {
			j.done(err)
		}
	}
	select {
	case <-b.drain:
		b.dropped(DropShutdown, len(batch))
		finish(fmt.Errorf("%w: %s", ErrDropped, DropShutdown))
		return
	default:
	}
	if !b.writeBreaker.Allow() {
		b.dropped(DropBreakerOpen, len(batch))
		finish(fmt.Errorf("%w: %s", ErrDropped, DropBreakerOpen))
		return
	}
	ws := make([]Write, len(batch))
	for i, j := range batch {
		ws[i] = j.w
	}
	ctx, cancel := context.WithTimeout(context.Background(), b.writes.Timeout.D())
	start := time.Now()
	err := putAll(ctx, b.store, ws)
	cancel()
	b.obs.WriteBatch(len(ws), time.Since(start), err)
	switch {
	case err == nil:
		b.writeBreaker.Success()
	case errors.Is(err, ErrUnavailable):
	default:
		b.lastWriteErr.Store(time.Now().UnixNano())
		b.writeErr.Store(&err)
		b.writeBreaker.Failure()
	}
	finish(err)
}

// putAll stores ws in one batch when s can, else one by one.
func putAll(ctx context.Context, s Store, ws []Write) error {
	if bp, ok := s.(BatchPutter); ok {
		return bp.PutBatch(ctx, ws)
	}
	var errs []error
	for _, w := range ws {
		if err := s.Put(ctx, w.Entry, w.Vec, w.TTL); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Health is the backend's state for /status.
type Health struct {
	State         BackendState `json:"state"`
	Since         time.Time    `json:"since"`
	Up            bool         `json:"up"` // lookups reach the store
	Why           string       `json:"why,omitempty"`
	ReadBreaker   string       `json:"read_breaker"`
	WriteBreaker  string       `json:"write_breaker"`
	WriteQueue    int64        `json:"write_queue"`
	WriteQueueCap int          `json:"write_queue_cap"`
}

// Health returns the current state and refreshes it.
func (b *Backend) Health() Health {
	st, why := b.evaluate()
	b.stateMu.Lock()
	from, since := b.state, b.stateSince
	if st != from {
		b.state, b.stateSince, since = st, time.Now(), time.Now()
	}
	b.stateMu.Unlock()
	if st != from {
		b.obs.StateChanged(from, st, why)
	}
	rs, _ := b.readBreaker.State()
	ws, _ := b.writeBreaker.State()
	return Health{State: st, Since: since, Up: st != StateBypassed, Why: why,
		ReadBreaker: rs.String(), WriteBreaker: ws.String(), WriteQueue: int64(len(b.queue)), WriteQueueCap: cap(b.queue)}
}

func (b *Backend) evaluate() (BackendState, string) {
	if r, ok := b.store.(readiness); ok && !r.Ready() {
		return StateBypassed, "store not connected"
	}
	if rs, _ := b.readBreaker.State(); rs != BreakerClosed {
		return StateBypassed, "read breaker " + rs.String()
	}
	if ws, _ := b.writeBreaker.State(); ws != BreakerClosed {
		return StateDegraded, "write breaker " + ws.String()
	}
	now := time.Now().UnixNano()
	recent := func(at *atomic.Int64) bool { t := at.Load(); return t != 0 && now-t < int64(troubleMemory) }
	switch {
	case recent(&b.lastDrop):
		return StateDegraded, "writes dropped in the last " + troubleMemory.String()
	case recent(&b.lastWriteErr):
		return StateDegraded, "writes failed in the last " + troubleMemory.String()
	case recent(&b.lastReadErr):
		return StateDegraded, "lookups failed in the last " + troubleMemory.String()
	}
	return StateOK, ""
}

func (b *Backend) breakerChanged(path string, from, to BreakerState) {
	last := b.readErr.Load()
	if path == "write" {
		last = b.writeErr.Load()
	}
	var err error
	if last != nil {
		err = *last
	}
	b.obs.BreakerChanged(path, from, to, err)
	b.Health()
}

// watch re-evaluates the state every second, so that a change that comes
// with time (recovery, a lazy store connecting) is reported too.
func (b *Backend) watch() {
	defer b.ticker.Done()
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-b.stop:
			return
		case <-t.C:
			b.Health()
		}
	}
}

// Close stops taking writes and stores what is queued until ctx is done;
// the rest is dropped. The store stays open: it belongs to the caller.
func (b *Backend) Close(ctx context.Context) error {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil
	}
	b.closed = true
	close(b.queue)
	b.mu.Unlock()
	close(b.stop)
	b.ticker.Wait()
	done := make(chan struct{})
	go func() { b.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		close(b.drain)
		<-done
	}
	return nil
}

type nopObserver struct{}

func (nopObserver) Lookup(string, time.Duration, error)                      {}
func (nopObserver) WriteBatch(int, time.Duration, error)                     {}
func (nopObserver) WriteDropped(string, int)                                 {}
func (nopObserver) BreakerChanged(string, BreakerState, BreakerState, error) {}
func (nopObserver) StateChanged(BackendState, BackendState, string)          {}
func (nopObserver) EmbedSkipped(error)                                       {}
