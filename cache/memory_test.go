package cache

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

const memDims = 64

func newMemStore(t *testing.T, maxBytes int64, dims int) *MemoryStore {
	t.Helper()
	m := NewMemoryStore(maxBytes, dims)
	t.Cleanup(func() { _ = m.Close() })
	return m
}

// memUnit returns a random L2-normalised vector.
func memUnit(rng *rand.Rand, dims int) []float32 {
	v := make([]float32, dims)
	var n float64
	for i := range v {
		x := rng.NormFloat64()
		v[i] = float32(x)
		n += x * x
	}
	inv := float32(1 / math.Sqrt(n))
	for i := range v {
		v[i] *= inv
	}
	return v
}

func memEntry(ns, key, scope string) *Entry {
	return &Entry{
		ID:        NewEntryID(),
		Namespace: ns,
		Model:     "m",
		Endpoint:  "chat",
		Content:   "answer for " + key,
		Finish:    "stop",
		Scope:     scope,
		ExactKey:  key,
		Created:   time.Now(),
	}
}

func memPut(t *testing.T, m *MemoryStore, e *Entry, vec []float32, ttl time.Duration) {
	t.Helper()
	if err := m.Put(context.Background(), e, vec, ttl); err != nil {
		t.Fatalf("Put(%s): %v", e.ExactKey, err)
	}
}

func memStats(t *testing.T, m *MemoryStore) Stats {
	t.Helper()
	st, err := m.Stats(context.Background())
	if err != nil {
		t.Fatalf("Stats: %v", err)
	}
	return st
}

func memSearchIDs(t *testing.T, m *MemoryStore, scope string, vec []float32, k int) []string {
	t.Helper()
	ms, err := m.Search(context.Background(), scope, vec, k)
	if err != nil {
		t.Fatalf("Search(%s): %v", scope, err)
	}
	ids := make([]string, len(ms))
	for i, mt := range ms {
		ids[i] = mt.Entry.ID
	}
	return ids
}

func memContains(ids []string, id string) bool {
	for _, x := range ids {
		if x == id {
			return true
		}
	}
	return false
}

func memWantGone(t *testing.T, m *MemoryStore, key string) {
	t.Helper()
	if e, err := m.Get(context.Background(), key); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Get(%s) = %v, %v; want ErrNotFound", key, e, err)
	}
}

func TestMemoryGetAfterPut(t *testing.T) {
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(1, 2))
	m := newMemStore(t, 1<<20, memDims)

	plain := memEntry("ns", "k-plain", "s")
	memPut(t, m, plain, nil, time.Hour)
	got, err := m.Get(ctx, "k-plain")
	if err != nil || got != plain {
		t.Fatalf("Get = %p, %v; want %p", got, err, plain)
	}
	memWantGone(t, m, "k-missing")
	memWantGone(t, m, "")

	// With a vector: reachable by key and by search.
	vec := memUnit(rng, memDims)
	both := memEntry("ns", "k-both", "s")
	memPut(t, m, both, vec, time.Hour)
	if got, err := m.Get(ctx, "k-both"); err != nil || got != both {
		t.Fatalf("Get(k-both) = %v, %v", got, err)
	}
	ms, err := m.Search(ctx, "s", vec, 5)
	if err != nil || len(ms) != 1 || ms[0].Entry != both || ms[0].Similarity < 0.999 {
		t.Fatalf("Search = %+v, %v; want only k-both with similarity 1", ms, err)
	}

	// Vector only: reachable by search, not by the empty key.
	vonly := memEntry("ns", "", "s")
	vonly.ID = ""
	vec2 := memUnit(rng, memDims)
	memPut(t, m, vonly, vec2, time.Hour)
	if vonly.ID == "" {
		t.Fatal("Put did not assign an id")
	}
	memWantGone(t, m, "")
	if ids := memSearchIDs(t, m, "s", vec2, 1); len(ids) != 1 || ids[0] != vonly.ID {
		t.Fatalf("Search(vec2) = %v; want [%s]", ids, vonly.ID)
	}

	st := memStats(t, m)
	if st.Entries != 2 || st.VectorEntries != 2 || st.Scopes != 1 || st.VectorSearchBy != "local" {
		t.Fatalf("Stats = %+v; want 2 exact, 2 vector, 1 scope, local", st)
	}
	want := plain.Size() + both.Size() + vonly.Size() + 2*4*memDims
	if st.Bytes != want {
		t.Fatalf("Stats.Bytes = %d; want %d", st.Bytes, want)
	}
}

func TestMemoryPutErrors(t *testing.T) {
	ctx := context.Background()
	m := newMemStore(t, 4096, memDims)
	if err := m.Put(ctx, nil, nil, time.Hour); err == nil {
		t.Error("Put(nil) succeeded")
	}
	if err := m.Put(ctx, memEntry("ns", "", "s"), nil, time.Hour); err == nil {
		t.Error("Put without key or vector succeeded")
	}
	if err := m.Put(ctx, memEntry("ns", "k", "s"), make([]float32, memDims+1), time.Hour); err == nil {
		t.Error("Put with wrong dims succeeded")
	}
	big := memEntry("ns", "big", "s")
	big.Content = strings.Repeat("x", 4096)
	if err := m.Put(ctx, big, nil, time.Hour); !errors.Is(err, ErrEntryTooLarge) {
		t.Errorf("Put(too large) = %v; want ErrEntryTooLarge", err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := m.Put(cctx, memEntry("ns", "k", "s"), nil, time.Hour); !errors.Is(err, context.Canceled) {
		t.Errorf("Put(cancelled) = %v; want context.Canceled", err)
	}
	if _, err := m.Get(cctx, "k"); !errors.Is(err, context.Canceled) {
		t.Errorf("Get(cancelled) = %v; want context.Canceled", err)
	}
	if _, err := m.Search(ctx, "s", make([]float32, 3), 1); err == nil {
		t.Error("Search with wrong dims succeeded")
	}
	if st := memStats(t, m); st.Entries != 0 || st.Bytes != 0 {
		t.Errorf("Stats after failed puts = %+v; want empty", st)
	}
}

// TestMemoryLateCallsAnswer: a deadline that passed before a call reached
// the store (the process was descheduled between the backend's timeout and
// the store, as on a loaded 2-core machine) is no failure of an in-process
// store. Before, such a Get failed, counted against the read breaker, and
// answered a request "bypass".
func TestMemoryLateCallsAnswer(t *testing.T) {
	m := newMemStore(t, 0, memDims)
	late, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel()
	vec := memUnit(rand.New(rand.NewPCG(1, 2)), memDims)
	e := memEntry("ns", "k", "s")
	if err := m.Put(late, e, vec, time.Hour); err != nil {
		t.Fatalf("Put(deadline passed) = %v; want stored", err)
	}
	if got, err := m.Get(late, "k"); err != nil || got != e {
		t.Errorf("Get(deadline passed) = %v, %v; want the entry", got, err)
	}
	if ms, err := m.Search(late, "s", vec, 1); err != nil || len(ms) != 1 || ms[0].Entry != e {
		t.Errorf("Search(deadline passed) = %v, %v; want the entry", ms, err)
	}
	if got, err := m.GetByID(late, e.ID); err != nil || got != e {
		t.Errorf("GetByID(deadline passed) = %v, %v; want the entry", got, err)
	}
}

func TestMemoryTTLExpiry(t *testing.T) {
	ctx := context.Background()
	m := newMemStore(t, 1<<20, memDims)
	short := memEntry("ns", "short", "")
	forever := memEntry("ns", "forever", "")
	memPut(t, m, short, nil, 50*time.Millisecond)
	memPut(t, m, forever, nil, 0) // ttl <= 0: no expiry
	if _, err := m.Get(ctx, "short"); err != nil {
		t.Fatalf("Get(short) before expiry: %v", err)
	}
	time.Sleep(80 * time.Millisecond)
	memWantGone(t, m, "short")
	if _, err := m.Get(ctx, "forever"); err != nil {
		t.Fatalf("Get(forever): %v", err)
	}
	// Get removed the expired entry at once, without waiting for the sweeper.
	if st := memStats(t, m); st.Entries != 1 || st.Bytes != forever.Size() {
		t.Fatalf("Stats = %+v; want only the entry without TTL", st)
	}
	if err := m.Delete(ctx, short.ID); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Delete(expired) = %v; want ErrNotFound", err)
	}
}

func TestMemoryExpiryRemovesVectors(t *testing.T) {
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(3, 4))
	m := newMemStore(t, 1<<20, memDims)
	q := memUnit(rng, memDims)
	short := memEntry("ns", "", "s") // vector only: only the sweeper can drop it
	long := memEntry("ns", "long", "s")
	memPut(t, m, short, q, 50*time.Millisecond)
	memPut(t, m, long, memUnit(rng, memDims), time.Hour)
	other := memEntry("ns", "", "s2")
	memPut(t, m, other, q, 50*time.Millisecond)
	if ids := memSearchIDs(t, m, "s", q, 4); len(ids) != 2 || ids[0] != short.ID {
		t.Fatalf("Search before expiry = %v; want [%s %s]", ids, short.ID, long.ID)
	}
	time.Sleep(80 * time.Millisecond)
	// Expired vectors are never returned, swept or not.
	if ids := memSearchIDs(t, m, "s", q, 4); len(ids) != 1 || ids[0] != long.ID {
		t.Fatalf("Search after expiry = %v; want [%s]", ids, long.ID)
	}
	if ids := memSearchIDs(t, m, "s2", q, 4); len(ids) != 0 {
		t.Fatalf("Search(s2) after expiry = %v; want none", ids)
	}
	// The sweeper drops them from the index.
	deadline := time.Now().Add(3 * sweepInterval)
	for {
		st := memStats(t, m)
		if st.VectorEntries == 1 && st.Scopes == 1 && m.index.Len() == 1 {
			if st.Bytes != long.Size()+4*memDims {
				t.Fatalf("Stats.Bytes after sweep = %d; want %d", st.Bytes, long.Size()+4*memDims)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("sweeper did not remove expired vectors: %+v, index %d", st, m.index.Len())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if _, err := m.Get(ctx, "long"); err != nil {
		t.Fatalf("Get(long): %v", err)
	}
}

func TestMemoryLRUEviction(t *testing.T) {
	ctx := context.Background()
	keys := []string{"k0", "k1", "k2", "k3"}
	size := memEntry("ns", "k0", "").Size()
	m := newMemStore(t, 3*size, memDims)
	for _, k := range keys[:3] {
		memPut(t, m, memEntry("ns", k, ""), nil, time.Hour)
	}
	if _, err := m.Get(ctx, "k0"); err != nil { // k1 is now the least recently used
		t.Fatal(err)
	}
	memPut(t, m, memEntry("ns", "k3", ""), nil, time.Hour)
	memWantGone(t, m, "k1")
	for _, k := range []string{"k0", "k2", "k3"} {
		if _, err := m.Get(ctx, k); err != nil {
			t.Fatalf("Get(%s) after eviction: %v", k, err)
		}
	}
	st := memStats(t, m)
	if st.Evictions != 1 || st.Entries != 3 || st.Bytes != 3*size {
		t.Fatalf("Stats = %+v; want 1 eviction, 3 entries, %d bytes", st, 3*size)
	}

	// A vector costs 4*dims bytes: k4 with one needs room for two entries.
	rng := rand.New(rand.NewPCG(5, 6))
	if 4*memDims > size {
		t.Fatal("test assumes a vector is smaller than an entry")
	}
	memPut(t, m, memEntry("ns", "k4", "s"), memUnit(rng, memDims), time.Hour)
	// Recency now: k4, k3, k2, k0 → k0 and k2 go.
	memWantGone(t, m, "k0")
	memWantGone(t, m, "k2")
	st = memStats(t, m)
	if st.Evictions != 3 || st.Bytes > 3*size || st.VectorEntries != 1 {
		t.Fatalf("Stats = %+v; want 3 evictions, <= %d bytes, 1 vector", st, 3*size)
	}
}

func TestMemoryEvictionDropsExpiredFirst(t *testing.T) {
	ctx := context.Background()
	size := memEntry("ns", "k0", "").Size()
	m := newMemStore(t, 2*size, memDims)
	memPut(t, m, memEntry("ns", "k1", ""), nil, time.Hour)
	memPut(t, m, memEntry("ns", "k2", ""), nil, 30*time.Millisecond) // expires
	time.Sleep(50 * time.Millisecond)
	memPut(t, m, memEntry("ns", "k3", ""), nil, time.Hour)
	if _, err := m.Get(ctx, "k1"); err != nil {
		t.Fatalf("Get(k1): %v; the expired entry should have made room", err)
	}
	if st := memStats(t, m); st.Evictions != 0 {
		t.Fatalf("Evictions = %d; want 0", st.Evictions)
	}
}

func TestMemoryReplaceSameKey(t *testing.T) {
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(7, 8))
	m := newMemStore(t, 1<<20, memDims)
	v1, v2 := memUnit(rng, memDims), memUnit(rng, memDims)
	e1 := memEntry("ns", "k", "s")
	e2 := memEntry("ns", "k", "s")
	e2.Content = "newer"
	memPut(t, m, e1, v1, time.Hour)
	memPut(t, m, e2, v2, time.Hour)
	if got, err := m.Get(ctx, "k"); err != nil || got != e2 {
		t.Fatalf("Get = %v, %v; want the replacement", got, err)
	}
	if ids := memSearchIDs(t, m, "s", v1, 10); len(ids) != 1 || ids[0] != e2.ID {
		t.Fatalf("Search = %v; want only %s", ids, e2.ID)
	}
	st := memStats(t, m)
	if st.Entries != 1 || st.VectorEntries != 1 || st.Bytes != e2.Size()+4*memDims {
		t.Fatalf("Stats = %+v; want one entry of %d bytes", st, e2.Size()+4*memDims)
	}
	if err := m.Delete(ctx, e1.ID); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Delete(replaced id) = %v; want ErrNotFound", err)
	}

	// Replacing without a vector drops the old vector.
	e3 := memEntry("ns", "k", "s")
	memPut(t, m, e3, nil, time.Hour)
	if ids := memSearchIDs(t, m, "s", v2, 10); len(ids) != 0 {
		t.Fatalf("Search after replace without vector = %v; want none", ids)
	}
	if st := memStats(t, m); st.VectorEntries != 0 || st.Scopes != 0 {
		t.Fatalf("Stats = %+v; want no vectors", st)
	}
}

func TestMemoryDelete(t *testing.T) {
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(9, 10))
	m := newMemStore(t, 1<<20, memDims)
	vec := memUnit(rng, memDims)
	e := memEntry("ns", "k", "s")
	keep := memEntry("ns", "keep", "s")
	memPut(t, m, e, vec, time.Hour)
	memPut(t, m, keep, memUnit(rng, memDims), time.Hour)
	if err := m.Delete(ctx, e.ID); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	memWantGone(t, m, "k")
	if ids := memSearchIDs(t, m, "s", vec, 10); memContains(ids, e.ID) || len(ids) != 1 {
		t.Fatalf("Search after Delete = %v; want only %s", ids, keep.ID)
	}
	if err := m.Delete(ctx, e.ID); !errors.Is(err, ErrNotFound) {
		t.Fatalf("second Delete = %v; want ErrNotFound", err)
	}
	if err := m.Delete(ctx, "nope"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Delete(unknown) = %v; want ErrNotFound", err)
	}
	st := memStats(t, m)
	if st.Entries != 1 || st.VectorEntries != 1 || st.Bytes != keep.Size()+4*memDims {
		t.Fatalf("Stats = %+v", st)
	}
}

func TestMemoryPurge(t *testing.T) {
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(11, 12))
	m := newMemStore(t, 1<<20, memDims)
	q := memUnit(rng, memDims)
	for i := range 3 {
		var vec []float32
		if i > 0 {
			vec = q
		}
		memPut(t, m, memEntry("a", fmt.Sprint("a", i), "s"), vec, time.Hour)
	}
	b0, b1 := memEntry("b", "b0", "s"), memEntry("b", "", "s")
	memPut(t, m, b0, nil, time.Hour)
	memPut(t, m, b1, q, time.Hour)

	n, err := m.Purge(ctx, "a")
	if err != nil || n != 3 {
		t.Fatalf("Purge(a) = %d, %v; want 3", n, err)
	}
	for i := range 3 {
		memWantGone(t, m, fmt.Sprint("a", i))
	}
	if ids := memSearchIDs(t, m, "s", q, 10); len(ids) != 1 || ids[0] != b1.ID {
		t.Fatalf("Search after Purge = %v; want [%s]", ids, b1.ID)
	}
	if _, err := m.Get(ctx, "b0"); err != nil {
		t.Fatalf("Get(b0): %v", err)
	}
	if n, err := m.Purge(ctx, "a"); err != nil || n != 0 {
		t.Fatalf("second Purge(a) = %d, %v; want 0", n, err)
	}
	st := memStats(t, m)
	if st.Entries != 1 || st.VectorEntries != 1 || st.Bytes != b0.Size()+b1.Size()+4*memDims {
		t.Fatalf("Stats = %+v", st)
	}
}

func TestMemorySearchScopeIsolation(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 14))
	m := newMemStore(t, 0, memDims)
	// Both the exact-scan and the prefiltered path.
	for _, n := range []int{10, DefaultIndexConfig().ExactMax + 100} {
		mine, other := fmt.Sprint("mine", n), fmt.Sprint("other", n)
		q := memUnit(rng, memDims)
		twin := memEntry("ns", "", other)
		memPut(t, m, twin, q, time.Hour)
		for range n {
			memPut(t, m, memEntry("ns", "", mine), memUnit(rng, memDims), time.Hour)
		}
		ms, err := m.Search(context.Background(), mine, q, 10)
		if err != nil || len(ms) != 10 {
			t.Fatalf("n=%d: Search = %d matches, %v; want 10", n, len(ms), err)
		}
		for _, mt := range ms {
			if mt.Entry == twin || mt.Entry.Scope != mine {
				t.Fatalf("n=%d: Search(%s) returned an entry of scope %s", n, mine, mt.Entry.Scope)
			}
		}
		if ids := memSearchIDs(t, m, other, q, 10); len(ids) != 1 || ids[0] != twin.ID {
			t.Fatalf("n=%d: Search(%s) = %v; want the twin", n, other, ids)
		}
		if ids := memSearchIDs(t, m, "nowhere", q, 10); len(ids) != 0 {
			t.Fatalf("Search(nowhere) = %v", ids)
		}
	}
}

func TestMemoryConcurrentStress(t *testing.T) {
	const (
		workers = 8
		ops     = 2000
		keys    = 200
	)
	ctx := context.Background()
	size := memEntry("ns0", "k000", "s0").Size() + 4*memDims
	m := newMemStore(t, 50*size, memDims) // far fewer than keys: constant eviction
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 99))
			for range ops {
				key := fmt.Sprintf("k%03d", rng.IntN(keys))
				scope := fmt.Sprint("s", rng.IntN(3))
				switch op := rng.IntN(100); {
				case op < 40:
					if e, err := m.Get(ctx, key); err == nil && e.ExactKey != key {
						t.Errorf("Get(%s) returned key %s", key, e.ExactKey)
					} else if err != nil && !errors.Is(err, ErrNotFound) {
						t.Errorf("Get: %v", err)
					}
				case op < 70:
					e := memEntry(fmt.Sprint("ns", rng.IntN(3)), key, scope)
					var vec []float32
					if rng.IntN(2) == 0 {
						vec = memUnit(rng, memDims)
					}
					ttl := time.Hour
					if rng.IntN(4) == 0 {
						ttl = time.Duration(1+rng.IntN(20)) * time.Millisecond
					}
					if err := m.Put(ctx, e, vec, ttl); err != nil {
						t.Errorf("Put: %v", err)
					}
				case op < 90:
					ms, err := m.Search(ctx, scope, memUnit(rng, memDims), 4)
					if err != nil {
						t.Errorf("Search: %v", err)
					}
					for i, mt := range ms {
						if mt.Entry.Scope != scope {
							t.Errorf("Search(%s) returned scope %s", scope, mt.Entry.Scope)
						}
						if i > 0 && mt.Similarity > ms[i-1].Similarity {
							t.Errorf("Search results out of order")
						}
					}
				case op < 97:
					if e, err := m.Get(ctx, key); err == nil {
						if err := m.Delete(ctx, e.ID); err != nil && !errors.Is(err, ErrNotFound) {
							t.Errorf("Delete: %v", err)
						}
					}
				case op < 99:
					if _, err := m.Stats(ctx); err != nil {
						t.Errorf("Stats: %v", err)
					}
				default:
					if _, err := m.Purge(ctx, fmt.Sprint("ns", rng.IntN(3))); err != nil {
						t.Errorf("Purge: %v", err)
					}
				}
			}
		})
	}
	wg.Wait()
	// Any writer applies the index removals queued by Gets of expired entries.
	if err := m.Delete(ctx, "no-such-id"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Delete(unknown) = %v", err)
	}
	st := memStats(t, m)
	if st.Bytes > 50*size || st.Bytes < 0 {
		t.Errorf("Bytes = %d; budget %d", st.Bytes, 50*size)
	}
	if int(st.VectorEntries) != m.index.Len() {
		t.Errorf("VectorEntries = %d but the index holds %d", st.VectorEntries, m.index.Len())
	}
	if st.Evictions == 0 {
		t.Error("no evictions under a budget of 50 entries for 200 keys")
	}
	// Every vector left must resolve to a live or not yet swept entry.
	for s := range 3 {
		scope := fmt.Sprint("s", s)
		ms, _ := m.Search(ctx, scope, memUnit(rand.New(rand.NewPCG(1, 1)), memDims), 1000)
		if len(ms) > int(st.VectorEntries) {
			t.Errorf("Search(%s) returned %d > %d vectors", scope, len(ms), st.VectorEntries)
		}
	}
}

// memWaitSweepers waits up to a second for want sweeper goroutines to run
// (they start and finish asynchronously) and returns how many there are.
func memWaitSweepers(want int) int {
	deadline := time.Now().Add(time.Second)
	for {
		n := memSweepers()
		if n == want || time.Now().After(deadline) {
			return n
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// memSweepers counts running MemoryStore sweeper goroutines.
func memSweepers() int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			return strings.Count(string(buf[:n]), "(*MemoryStore).sweeper")
		}
		buf = make([]byte, 2*len(buf))
	}
}

func TestMemoryCloseStopsSweeper(t *testing.T) {
	before := memWaitSweepers(0) // earlier tests' stores are closed
	stores := make([]*MemoryStore, 3)
	for i := range stores {
		stores[i] = NewMemoryStore(1<<20, memDims)
	}
	if got := memWaitSweepers(before + 3); got != before+3 {
		t.Fatalf("%d sweepers running; want %d", got, before+3)
	}
	for _, m := range stores {
		if err := m.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
		if err := m.Close(); err != nil { // idempotent
			t.Fatalf("second Close: %v", err)
		}
	}
	if got := memWaitSweepers(before); got != before {
		t.Fatalf("%d sweepers running after Close; want %d", got, before)
	}
	// A closed store still answers, dropping expired entries lazily.
	m := stores[0]
	memPut(t, m, memEntry("ns", "k", ""), nil, 10*time.Millisecond)
	time.Sleep(20 * time.Millisecond)
	memWantGone(t, m, "k")
}

// TestMemoryGetDoesNotWaitForIndex holds the index's write lock, as a long
// Add would, and checks that Gets (hits, misses, lazy expiry) still return.
func TestMemoryGetDoesNotWaitForIndex(t *testing.T) {
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(15, 16))
	m := newMemStore(t, 1<<20, memDims)
	memPut(t, m, memEntry("ns", "live", "s"), memUnit(rng, memDims), time.Hour)
	memPut(t, m, memEntry("ns", "dying", "s"), memUnit(rng, memDims), 10*time.Millisecond)
	time.Sleep(20 * time.Millisecond)

	m.index.mu.Lock()
	done := make(chan error, 1)
	go func() {
		if _, err := m.Get(ctx, "live"); err != nil {
			done <- err
			return
		}
		if _, err := m.Get(ctx, "dying"); !errors.Is(err, ErrNotFound) {
			done <- fmt.Errorf("Get(dying) = %v; want ErrNotFound", err)
			return
		}
		done <- nil
	}()
	select {
	case err := <-done:
		m.index.mu.Unlock()
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(2 * time.Second):
		m.index.mu.Unlock()
		t.Fatal("Get blocked on the vector index lock")
	}
	// The next writer drops the expired vector.
	if err := m.Delete(ctx, "no-such-id"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Delete(unknown) = %v", err)
	}
	if n := m.index.Len(); n != 1 {
		t.Fatalf("index holds %d vectors; want 1", n)
	}
}
