package cache

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"frontdoor/internal/units"
)

// recorder is an Observer that keeps what it saw.
type recorder struct {
	mu       sync.Mutex
	dropped  map[string]int
	breakers []string
	states   []string
	written  int
	failed   int
}

func newRecorder() *recorder { return &recorder{dropped: map[string]int{}} }

func (r *recorder) Lookup(string, time.Duration, error) {}
func (r *recorder) WriteBatch(n int, _ time.Duration, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err != nil {
		r.failed += n
	} else {
		r.written += n
	}
}
func (r *recorder) WriteDropped(reason string, n int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.dropped[reason] += n
}
func (r *recorder) BreakerChanged(path string, _, to BreakerState, _ error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.breakers = append(r.breakers, path+":"+to.String())
}
func (r *recorder) EmbedSkipped(error) {}

func (r *recorder) StateChanged(_, to BackendState, _ string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.states = append(r.states, string(to))
}

func (r *recorder) snapshot() (dropped map[string]int, breakers, states []string, written, failed int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	d := map[string]int{}
	for k, v := range r.dropped {
		d[k] = v
	}
	return d, append([]string(nil), r.breakers...), append([]string(nil), r.states...), r.written, r.failed
}

// gatedStore is a memory store whose Puts wait at a gate and may fail.
type gatedStore struct {
	*MemoryStore
	gate    chan struct{}
	putErr  atomic.Pointer[error]
	batches atomic.Int64
}

func (g *gatedStore) PutBatch(ctx context.Context, ws []Write) error {
	g.batches.Add(1)
	select {
	case <-g.gate:
	case <-ctx.Done():
		return ctx.Err()
	}
	if p := g.putErr.Load(); p != nil {
		return *p
	}
	return putAll(ctx, g.MemoryStore, ws)
}

func testBackendConfigs() (ReadsConfig, WritesConfig) {
	def := DefaultConfig()
	r, w := def.Reads, def.Writes
	w.Breaker = BreakerConfig{FailureRatio: 0.5, MinCalls: 3, Window: units.Duration(10 * time.Second), OpenFor: units.Duration(200 * time.Millisecond)}
	return r, w
}

func exactWrite(i int) Write {
	e := memEntry("t", "k"+string(rune('a'+i%26))+time.Now().String(), "")
	return Write{Entry: e, TTL: time.Minute}
}

// TestBackendQueueFullDropsAndNeverBlocks: with the workers stuck, writes
// past the queue's size are dropped at once and counted, and every done is
// called exactly once.
func TestBackendQueueFullDropsAndNeverBlocks(t *testing.T) {
	st := &gatedStore{MemoryStore: newMemStore(t, 16<<20, 8), gate: make(chan struct{})}
	reads, writes := testBackendConfigs()
	writes.Queue, writes.Workers, writes.Batch = 4, 1, 2
	rec := newRecorder()
	b := NewBackend(st, reads, writes, rec)
	var doneCalls atomic.Int64
	var droppedErrs atomic.Int64
	done := func(err error) {
		doneCalls.Add(1)
		if errors.Is(err, ErrDropped) {
			droppedErrs.Add(1)
		}
	}
	b.Enqueue(exactWrite(0), done)
	rdsEventually(t, time.Second, "the worker holds the first write", func() bool { return st.batches.Load() == 1 })
	start := time.Now()
	for i := 1; i < 50; i++ {
		b.Enqueue(exactWrite(i), done)
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("50 enqueues took %v with the store stuck", d)
	}
	dropped, _, _, _, _ := rec.snapshot()
	// One write is held by the worker, 4 wait in the queue.
	if dropped[DropQueueFull] != 45 || droppedErrs.Load() != 45 {
		t.Fatalf("dropped %v (done errors %d), want 45 queue_full", dropped, droppedErrs.Load())
	}
	if h := b.Health(); h.State != StateDegraded || h.WriteQueue != 4 {
		t.Fatalf("health %+v, want degraded with 4 queued", h)
	}
	close(st.gate)
	if err := b.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if doneCalls.Load() != 50 {
		t.Fatalf("done called %d times, want 50", doneCalls.Load())
	}
	if _, _, _, written, _ := rec.snapshot(); written != 5 {
		t.Fatalf("written %d, want 5", written)
	}
}

// TestBackendBatches: queued writes go to the store in batches.
func TestBackendBatches(t *testing.T) {
	st := &gatedStore{MemoryStore: newMemStore(t, 16<<20, 8), gate: make(chan struct{})}
	reads, writes := testBackendConfigs()
	writes.Workers, writes.Batch = 1, 16
	b := NewBackend(st, reads, writes, nil)
	var wg sync.WaitGroup
	for i := range 33 {
		wg.Add(1)
		b.Enqueue(exactWrite(i), func(error) { wg.Done() })
	}
	close(st.gate)
	wg.Wait()
	// The worker takes the first write alone, then batches of up to 16.
	if n := st.batches.Load(); n < 3 || n > 4 {
		t.Fatalf("%d batches for 33 writes with batch 16", n)
	}
	_ = b.Close(context.Background())
}

// TestBackendWriteFailuresKeepReads: failing writes open the write breaker
// (and then drop), but lookups go on.
func TestBackendWriteFailuresKeepReads(t *testing.T) {
	st := &gatedStore{MemoryStore: newMemStore(t, 16<<20, 8), gate: make(chan struct{})}
	close(st.gate)
	boom := errors.New("boom")
	st.putErr.Store(&boom)
	reads, writes := testBackendConfigs()
	writes.Workers, writes.Batch = 1, 1
	rec := newRecorder()
	b := NewBackend(st, reads, writes, rec)
	defer b.Close(context.Background())
	done := make(chan error, 20)
	for i := range 20 {
		b.Enqueue(exactWrite(i), func(err error) { done <- err })
	}
	for range 20 {
		<-done
	}
	dropped, breakers, _, _, failed := rec.snapshot()
	if failed < 3 || dropped[DropBreakerOpen] == 0 || failed+dropped[DropBreakerOpen] != 20 {
		t.Fatalf("failed %d, dropped %v: want the breaker to open after 3 failures", failed, dropped)
	}
	if len(breakers) == 0 || breakers[0] != "write:open" {
		t.Fatalf("breaker changes %v", breakers)
	}
	if _, err := b.Get(context.Background(), "anything"); err != nil {
		t.Fatalf("Get with the write breaker open: %v", err)
	}
	h := b.Health()
	if h.State != StateDegraded || !h.Up || h.WriteBreaker != "open" || h.ReadBreaker != "closed" {
		t.Fatalf("health %+v", h)
	}
	// The store heals: after open_for a probe goes through and closes it.
	st.putErr.Store(nil)
	time.Sleep(250 * time.Millisecond)
	ok := make(chan error, 1)
	b.Enqueue(exactWrite(99), func(err error) { ok <- err })
	if err := <-ok; err != nil {
		t.Fatalf("probe write: %v", err)
	}
	if h := b.Health(); h.WriteBreaker != "closed" {
		t.Fatalf("write breaker %s after a good probe", h.WriteBreaker)
	}
}

// TestBackendCloseDrainsThenDrops: Close stores what is queued while its
// context lasts, and drops (and reports) the rest.
func TestBackendCloseDrainsThenDrops(t *testing.T) {
	st := &gatedStore{MemoryStore: newMemStore(t, 16<<20, 8), gate: make(chan struct{})}
	reads, writes := testBackendConfigs()
	writes.Workers, writes.Batch, writes.Timeout = 1, 1, units.Duration(50*time.Millisecond)
	rec := newRecorder()
	b := NewBackend(st, reads, writes, rec)
	var calls atomic.Int64
	for i := range 10 {
		b.Enqueue(exactWrite(i), func(error) { calls.Add(1) })
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	_ = b.Close(ctx)
	if calls.Load() != 10 {
		t.Fatalf("done called %d times, want 10", calls.Load())
	}
	dropped, _, _, _, _ := rec.snapshot()
	if dropped[DropShutdown] == 0 {
		t.Fatalf("dropped %v, want shutdown drops", dropped)
	}
	b.Enqueue(exactWrite(11), func(err error) {
		if !errors.Is(err, ErrDropped) {
			t.Errorf("write after Close: %v", err)
		}
	})
}

// TestBackendSlowWritesNeverSwitchReadsOff pauses Redis's writes (CLIENT
// PAUSE WRITE) while lookups go on: the writes time out and open the write
// breaker, the lookups keep working, and the read breaker stays closed.
func TestBackendSlowWritesNeverSwitchReadsOff(t *testing.T) {
	forEachRedisMode(t, func(t *testing.T, m redisMode) {
		r, c := m.start(t)
		st := newTestRedisStore(t, c, RedisOptions{VectorSearch: m.vs, WriteTimeout: 100 * time.Millisecond,
			Writer: newTestRedisClient(t, r.Addr(), 100*time.Millisecond)})
		ctx := context.Background()
		rng := rand.New(rand.NewPCG(40, 40))
		known := rdsEntry("t", "s", "known")
		if err := st.Put(ctx, known, rdsUnit(rng), time.Minute); err != nil {
			t.Fatal(err)
		}
		reads, writes := testBackendConfigs()
		// A lookup's own timeout is not what this test is about: a loaded
		// machine can take over 100 ms for one, which would count against
		// the read breaker for a reason other than the paused writes.
		reads.Timeout = units.Duration(2 * time.Second)
		writes.Timeout = units.Duration(100 * time.Millisecond)
		writes.Workers, writes.Batch = 2, 4
		rec := newRecorder()
		b := NewBackend(st, reads, writes, rec)
		defer b.Close(ctx)
		if err := c.Do(ctx, "CLIENT", "PAUSE", "1500", "WRITE").Err(); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(time.Second)
		for i := 0; time.Now().Before(deadline); i++ {
			b.Enqueue(Write{Entry: rdsEntry("t", "s", "w"), Vec: rdsUnit(rng), TTL: time.Minute}, nil)
			if e, err := b.Get(ctx, known.ExactKey); err != nil || e == nil {
				t.Fatalf("lookup %d while writes are paused: %v, %v", i, e, err)
			}
			time.Sleep(5 * time.Millisecond)
		}
		_, breakers, _, _, failed := rec.snapshot()
		if failed == 0 || !contains(breakers, "write:open") || contains(breakers, "read:open") {
			t.Fatalf("failed writes %d, breaker changes %v: want the write breaker open and the read one closed", failed, breakers)
		}
		if h := b.Health(); !h.Up || h.ReadBreaker != "closed" {
			t.Fatalf("health %+v", h)
		}
	})
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}
