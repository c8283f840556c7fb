package cache

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"frontdoor/internal/redisconn"
	"frontdoor/internal/testenv"
	"frontdoor/internal/units"
)

const rdsDims = 64

// newTestRedisClient builds the client the way the gateway does.
func newTestRedisClient(tb testing.TB, addr string, timeout time.Duration) redis.UniversalClient {
	tb.Helper()
	cfg := redisconn.DefaultConfig()
	cfg.URL = "redis://" + addr + "/0"
	cfg.Timeout = units.Duration(timeout)
	c, err := redisconn.New(cfg, "")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = c.Close() })
	return c
}

func newTestRedisStore(tb testing.TB, c redis.UniversalClient, opt RedisOptions) *RedisStore {
	tb.Helper()
	if opt.Dims == 0 {
		opt.Dims = rdsDims
	}
	if opt.Prefix == "" {
		opt.Prefix = "fd:"
	}
	if opt.ReadTimeout == 0 {
		opt.ReadTimeout = 100 * time.Millisecond
	}
	if opt.SyncInterval == 0 {
		opt.SyncInterval = 100 * time.Millisecond
	}
	if opt.VectorSearch == "" {
		opt.VectorSearch = "local"
	}
	s, err := NewRedisStore(context.Background(), c, opt)
	if err != nil {
		tb.Fatalf("NewRedisStore: %v", err)
	}
	tb.Cleanup(func() { _ = s.Close() })
	return s
}

// redisMode is one row of the table of Redis backends that every store
// behaviour runs on: plain Redis with the in-process index, and Redis with
// RediSearch (skipped, with a message, where the module is absent).
type redisMode struct {
	name, vs string
	start    func(testing.TB) (*testenv.Redis, redis.UniversalClient)
}

var redisModes = []redisMode{
	{"local", "local", func(tb testing.TB) (*testenv.Redis, redis.UniversalClient) {
		r := testenv.StartRedis(tb)
		return r, newTestRedisClient(tb, r.Addr(), time.Second) // -race on two busy cores
	}},
	{"redisearch", "redisearch", func(tb testing.TB) (*testenv.Redis, redis.UniversalClient) {
		r := testenv.StartRediSearch(tb)
		return r, newTestRedisClient(tb, r.Addr(), time.Second) // indexing writes are slower
	}},
}

func forEachRedisMode(t *testing.T, f func(t *testing.T, m redisMode)) {
	for _, m := range redisModes {
		t.Run(m.name, func(t *testing.T) { f(t, m) })
	}
}

// rdsVectors counts the vectors a store searches: its in-process index, or
// the RediSearch index.
func rdsVectors(t *testing.T, s *RedisStore) int {
	if s.Mode() == modeLocal {
		return s.idx.Load().Len()
	}
	st, err := s.Stats(context.Background())
	if err != nil {
		t.Fatalf("Stats: %v", err)
	}
	return int(st.VectorEntries)
}

// startTestRedis starts redis-server and returns a client with a 1s
// timeout: -race on two busy cores stalls Redis past 100ms at times. Tests
// of timeouts build their own client.
func startTestRedis(tb testing.TB) (*testenv.Redis, redis.UniversalClient) {
	r := testenv.StartRedis(tb)
	return r, newTestRedisClient(tb, r.Addr(), time.Second)
}

func rdsUnit(rng *rand.Rand) []float32 {
	v := make([]float32, rdsDims)
	for i := range v {
		v[i] = float32(rng.NormFloat64())
	}
	return rdsNormalize(v)
}

func rdsNormalize(v []float32) []float32 {
	var n float64
	for _, f := range v {
		n += float64(f) * float64(f)
	}
	n = math.Sqrt(n)
	for i := range v {
		v[i] = float32(float64(v[i]) / n)
	}
	return v
}

// rdsNear returns a unit vector close to v (cosine around 0.99).
func rdsNear(rng *rand.Rand, v []float32) []float32 {
	w := make([]float32, len(v))
	for i := range v {
		w[i] = v[i] + float32(rng.NormFloat64())*0.015
	}
	return rdsNormalize(w)
}

func rdsEntry(ns, scope, content string) *Entry {
	id := NewEntryID()
	return &Entry{
		ID: id, Namespace: ns, Model: "m", Endpoint: "chat", Content: content, Finish: "stop",
		Usage: Usage{PromptTokens: 3, CompletionTokens: 5, TotalTokens: 8}, Created: time.Unix(1700000000, 0).UTC(),
		Scope: scope, ExactKey: "k-" + id,
	}
}

func rdsSameEntry(t *testing.T, got, want *Entry) {
	t.Helper()
	g, _ := got.Marshal()
	w, _ := want.Marshal()
	if string(g) != string(w) {
		t.Fatalf("entry mismatch:\n got %.200s\nwant %.200s", g, w)
	}
}

func rdsEventually(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %s", d, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func rdsHasHit(s *RedisStore, scope string, vec []float32, id string) bool {
	ms, err := s.Search(context.Background(), scope, vec, 3)
	return err == nil && len(ms) > 0 && ms[0].Entry.ID == id
}

func TestRedisExactPutGet(t *testing.T) {
	forEachRedisMode(t, func(t *testing.T, m redisMode) {
		_, c := m.start(t)
		s := newTestRedisStore(t, c, RedisOptions{VectorSearch: m.vs})
		ctx := context.Background()
		e := rdsEntry("t1", "", "hello")
		if err := s.Put(ctx, e, nil, time.Minute); err != nil {
			t.Fatal(err)
		}
		got, err := s.Get(ctx, e.ExactKey)
		if err != nil {
			t.Fatal(err)
		}
		rdsSameEntry(t, got, e)
		if _, err := s.Get(ctx, "missing"); !errors.Is(err, ErrNotFound) {
			t.Fatalf("missing key: %v, want ErrNotFound", err)
		}
		raw, err := c.Get(ctx, "fd:e:"+e.ExactKey).Bytes()
		if err != nil || raw[0] != payloadRaw {
			t.Fatalf("small entry stored as %v, %v; want raw", raw[:1], err)
		}
		if pttl := c.PTTL(ctx, "fd:e:"+e.ExactKey).Val(); pttl <= 0 || pttl > time.Minute {
			t.Fatalf("PTTL %v", pttl)
		}
	})
}

func TestRedisPutValidation(t *testing.T) {
	forEachRedisMode(t, func(t *testing.T, m redisMode) {
		_, c := m.start(t)
		s := newTestRedisStore(t, c, RedisOptions{VectorSearch: m.vs})
		ctx := context.Background()
		v := rdsUnit(rand.New(rand.NewPCG(1, 1)))
		for name, put := range map[string]func() error{
			"nil entry":   func() error { return s.Put(ctx, nil, nil, time.Minute) },
			"zero ttl":    func() error { return s.Put(ctx, rdsEntry("n", "s", "x"), nil, 0) },
			"bad dims":    func() error { return s.Put(ctx, rdsEntry("n", "s", "x"), v[:10], time.Minute) },
			"no scope":    func() error { return s.Put(ctx, rdsEntry("n", "", "x"), v, time.Minute) },
			"comma scope": func() error { return s.Put(ctx, rdsEntry("n", "a,b", "x"), v, time.Minute) },
			"no target":   func() error { e := rdsEntry("n", "s", "x"); e.ExactKey = ""; return s.Put(ctx, e, nil, time.Minute) },
		} {
			if err := put(); err == nil {
				t.Errorf("%s: Put succeeded", name)
			}
		}
		if _, err := s.Search(ctx, "s", v[:10], 1); err == nil {
			t.Error("Search with bad dims succeeded")
		}
		e := rdsEntry("n", "s", "x")
		e.ID = ""
		if err := s.Put(ctx, e, v, time.Minute); err != nil || len(e.ID) != 16 {
			t.Fatalf("Put without id: %v, id %q", err, e.ID)
		}
		if ms, _ := s.Search(ctx, "s", v, 1); len(ms) != 1 || ms[0].Entry.ID != e.ID {
			t.Fatalf("entry put without id not found: %+v", ms)
		}
	})
}

func TestRedisTTLExpiry(t *testing.T) {
	forEachRedisMode(t, func(t *testing.T, m redisMode) {
		_, c := m.start(t)
		s := newTestRedisStore(t, c, RedisOptions{VectorSearch: m.vs})
		ctx := context.Background()
		e := rdsEntry("t1", "", "short-lived")
		start := time.Now()
		if err := s.Put(ctx, e, nil, 500*time.Millisecond); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Get(ctx, e.ExactKey); err != nil && time.Since(start) < 500*time.Millisecond {
			t.Fatal(err)
		}
		time.Sleep(time.Until(start.Add(600 * time.Millisecond)))
		if _, err := s.Get(ctx, e.ExactKey); !errors.Is(err, ErrNotFound) {
			t.Fatalf("after TTL: %v, want ErrNotFound", err)
		}
		if err := s.Delete(ctx, e.ID); !errors.Is(err, ErrNotFound) {
			t.Fatalf("Delete after TTL: %v, want ErrNotFound", err)
		}
	})
}

func TestRedisCompression(t *testing.T) {
	forEachRedisMode(t, func(t *testing.T, m redisMode) {
		_, c := m.start(t)
		s := newTestRedisStore(t, c, RedisOptions{VectorSearch: m.vs})
		ctx := context.Background()
		rng := rand.New(rand.NewPCG(2, 2))
		words := strings.Fields("a goroutine is a lightweight thread managed by the Go runtime channels connect concurrent goroutines")
		var sb strings.Builder
		for sb.Len() < 100_000 {
			sb.WriteString(words[rng.IntN(len(words))])
			sb.WriteByte(' ')
		}
		e := rdsEntry("t1", "scope-z", sb.String())
		e.ToolCalls = []byte(`[{"id":"c1","type":"function","function":{"name":"f","arguments":"{}"}}]`)
		vec := rdsUnit(rng)
		if err := s.Put(ctx, e, vec, time.Minute); err != nil {
			t.Fatal(err)
		}
		raw, err := c.Get(ctx, "fd:e:"+e.ExactKey).Bytes()
		if err != nil {
			t.Fatal(err)
		}
		js, _ := e.Marshal()
		if raw[0] != payloadS2 || len(raw) >= len(js)/2 {
			t.Fatalf("large entry stored with header %d, %d bytes for %d bytes of JSON", raw[0], len(raw), len(js))
		}
		got, err := s.Get(ctx, e.ExactKey)
		if err != nil {
			t.Fatal(err)
		}
		rdsSameEntry(t, got, e)
		ms, err := s.Search(ctx, "scope-z", vec, 1)
		if err != nil || len(ms) != 1 {
			t.Fatalf("Search: %v, %v", ms, err)
		}
		rdsSameEntry(t, ms[0].Entry, e)
		if _, err := decodePayload([]byte{payloadS2, 0xff, 0xff, 0xff}); err == nil {
			t.Fatal("corrupt payload decoded")
		}
		if _, err := decodePayload([]byte{9, '{', '}'}); err == nil {
			t.Fatal("unknown encoding decoded")
		}
	})
}

func TestRedisDeleteByID(t *testing.T) {
	forEachRedisMode(t, func(t *testing.T, m redisMode) {
		_, c := m.start(t)
		s := newTestRedisStore(t, c, RedisOptions{VectorSearch: m.vs})
		ctx := context.Background()
		rng := rand.New(rand.NewPCG(3, 3))
		e, vec := rdsEntry("t1", "s1", "to delete"), rdsUnit(rng)
		keep, kvec := rdsEntry("t1", "s1", "to keep"), rdsUnit(rng)
		for _, p := range []struct {
			e *Entry
			v []float32
		}{{e, vec}, {keep, kvec}} {
			if err := s.Put(ctx, p.e, p.v, time.Minute); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.Delete(ctx, e.ID); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Get(ctx, e.ExactKey); !errors.Is(err, ErrNotFound) {
			t.Fatalf("Get after Delete: %v", err)
		}
		if ms, _ := s.Search(ctx, "s1", vec, 5); len(ms) != 1 || ms[0].Entry.ID != keep.ID {
			t.Fatalf("Search after Delete: %+v", ms)
		}
		if n := c.Exists(ctx, "fd:v:"+e.ID, "fd:id:"+e.ID).Val(); n != 0 {
			t.Fatalf("%d keys of the deleted entry remain", n)
		}
		if err := s.Delete(ctx, e.ID); !errors.Is(err, ErrNotFound) {
			t.Fatalf("second Delete: %v, want ErrNotFound", err)
		}
		if _, err := s.Get(ctx, keep.ExactKey); err != nil {
			t.Fatalf("other entry: %v", err)
		}
	})
}

func TestRedisPurgeNamespace(t *testing.T) {
	forEachRedisMode(t, func(t *testing.T, m redisMode) {
		_, c := m.start(t)
		s := newTestRedisStore(t, c, RedisOptions{VectorSearch: m.vs})
		ctx := context.Background()
		rng := rand.New(rand.NewPCG(4, 4))
		var a, b []*Entry
		vec := rdsUnit(rng)
		for i := range 3 {
			e := rdsEntry("tenant:a", "sa", fmt.Sprint("a", i))
			var v []float32
			if i < 2 {
				v = rdsNear(rng, vec)
			}
			if err := s.Put(ctx, e, v, time.Minute); err != nil {
				t.Fatal(err)
			}
			a = append(a, e)
		}
		for i := range 2 {
			e := rdsEntry("tenant:b", "sb", fmt.Sprint("b", i))
			if err := s.Put(ctx, e, rdsNear(rng, vec), time.Minute); err != nil {
				t.Fatal(err)
			}
			b = append(b, e)
		}
		n, err := s.Purge(ctx, "tenant:a")
		if err != nil || n != 3 {
			t.Fatalf("Purge = %d, %v; want 3", n, err)
		}
		for _, e := range a {
			if _, err := s.Get(ctx, e.ExactKey); !errors.Is(err, ErrNotFound) {
				t.Fatalf("purged entry: %v", err)
			}
		}
		if ms, _ := s.Search(ctx, "sa", vec, 5); len(ms) != 0 {
			t.Fatalf("purged vectors found: %d", len(ms))
		}
		for _, e := range b {
			if _, err := s.Get(ctx, e.ExactKey); err != nil {
				t.Fatalf("other namespace lost an entry: %v", err)
			}
		}
		if ms, _ := s.Search(ctx, "sb", vec, 5); len(ms) != 2 {
			t.Fatalf("other namespace: %d vectors, want 2", len(ms))
		}
		if n, err := s.Purge(ctx, "tenant:a"); n != 0 || err != nil {
			t.Fatalf("second Purge = %d, %v", n, err)
		}
	})
}

func TestRedisPurgeBatches(t *testing.T) {
	forEachRedisMode(t, func(t *testing.T, m redisMode) {
		_, c := m.start(t)
		s := newTestRedisStore(t, c, RedisOptions{VectorSearch: m.vs})
		ctx := context.Background()
		const total = 2*purgeBatch + 7
		pipe := c.Pipeline()
		for i := range total {
			e := rdsEntry("big", "", fmt.Sprint(i))
			// Through the store for a few, raw for speed for the rest.
			if i < 10 {
				if err := s.Put(ctx, e, nil, time.Minute); err != nil {
					t.Fatal(err)
				}
				continue
			}
			p, _ := encodePayload(e)
			pipe.Set(ctx, s.exactKey(e.ExactKey), p, time.Minute)
			pipe.Set(ctx, s.idKey(e.ID), encodeRef(e.Namespace, e.ExactKey), time.Minute)
			pipe.ZAdd(ctx, s.nsKey("big"), redis.Z{Score: float64(time.Now().Add(time.Minute).UnixMilli()), Member: e.ID})
		}
		if _, err := pipe.Exec(ctx); err != nil {
			t.Fatal(err)
		}
		n, err := s.Purge(ctx, "big")
		if err != nil || n != total {
			t.Fatalf("Purge = %d, %v; want %d", n, err, total)
		}
		if keys := c.Keys(ctx, "fd:e:*").Val(); len(keys) != 0 {
			t.Fatalf("%d exact keys left", len(keys))
		}
	})
}

func TestRedisStats(t *testing.T) {
	forEachRedisMode(t, func(t *testing.T, m redisMode) {
		_, c := m.start(t)
		s := newTestRedisStore(t, c, RedisOptions{VectorSearch: m.vs})
		ctx := context.Background()
		rng := rand.New(rand.NewPCG(5, 5))
		for i := range 4 {
			var v []float32
			if i%2 == 0 {
				v = rdsUnit(rng)
			}
			if err := s.Put(ctx, rdsEntry(fmt.Sprint("ns", i%3), fmt.Sprint("scope", i), "x"), v, time.Minute); err != nil {
				t.Fatal(err)
			}
		}
		st, err := s.Stats(ctx)
		if err != nil {
			t.Fatal(err)
		}
		wantScopes := int64(2)
		if m.vs == modeRedisearch {
			wantScopes = 0 // unknown: RediSearch is not asked
		}
		if st.Entries != 4 || st.VectorEntries != 2 || st.Scopes != wantScopes || st.VectorSearchBy != m.vs {
			t.Fatalf("Stats = %+v", st)
		}
	})
}

func TestRedisSearchScope(t *testing.T) {
	forEachRedisMode(t, func(t *testing.T, m redisMode) {
		_, c := m.start(t)
		s := newTestRedisStore(t, c, RedisOptions{VectorSearch: m.vs})
		ctx := context.Background()
		rng := rand.New(rand.NewPCG(6, 6))
		q := rdsUnit(rng)
		best := rdsEntry("t", "scopeA", "best")
		other := rdsEntry("t", "scopeA", "other")
		foreign := rdsEntry("t", "scopeB", "foreign") // nearest of all, wrong scope
		puts := []struct {
			e *Entry
			v []float32
		}{{best, rdsNear(rng, q)}, {other, rdsUnit(rng)}, {foreign, q}}
		for _, p := range puts {
			if err := s.Put(ctx, p.e, p.v, time.Minute); err != nil {
				t.Fatal(err)
			}
		}
		ms, err := s.Search(ctx, "scopeA", q, 5)
		if err != nil {
			t.Fatal(err)
		}
		if len(ms) != 2 || ms[0].Entry.ID != best.ID || ms[1].Entry.ID != other.ID {
			t.Fatalf("Search = %+v", ms)
		}
		if ms[0].Similarity < 0.95 || ms[0].Similarity <= ms[1].Similarity {
			t.Fatalf("similarities %v, %v", ms[0].Similarity, ms[1].Similarity)
		}
		rdsSameEntry(t, ms[0].Entry, best)
		if ms, _ := s.Search(ctx, "scopeC", q, 5); len(ms) != 0 {
			t.Fatalf("empty scope returned %d", len(ms))
		}
		if ms, _ := s.Search(ctx, "scopeA", q, 0); len(ms) != 0 {
			t.Fatalf("k=0 returned %d", len(ms))
		}
	})
}

// TestRedisReplicasSync runs two stores ("replicas") on one server.
func TestRedisReplicasSync(t *testing.T) {
	forEachRedisMode(t, func(t *testing.T, m redisMode) {
		r, c := m.start(t)
		a := newTestRedisStore(t, c, RedisOptions{VectorSearch: m.vs})
		b := newTestRedisStore(t, newTestRedisClient(t, r.Addr(), time.Second), RedisOptions{VectorSearch: m.vs})
		ctx := context.Background()
		rng := rand.New(rand.NewPCG(7, 7))
		e, v := rdsEntry("t", "s", "shared"), rdsUnit(rng)
		if err := a.Put(ctx, e, v, time.Minute); err != nil {
			t.Fatal(err)
		}
		rdsEventually(t, 2*time.Second, "Put on A is a hit on B", func() bool { return rdsHasHit(b, "s", rdsNear(rng, v), e.ID) })
		if err := a.Delete(ctx, e.ID); err != nil {
			t.Fatal(err)
		}
		rdsEventually(t, 2*time.Second, "Delete on A leaves B's index", func() bool { return rdsVectors(t, b) == 0 })
		if ms, _ := b.Search(ctx, "s", v, 1); len(ms) != 0 {
			t.Fatal("deleted entry found on B")
		}

		// Purge on B reaches A.
		e2 := rdsEntry("t2", "s", "purged")
		if err := a.Put(ctx, e2, v, time.Minute); err != nil {
			t.Fatal(err)
		}
		rdsEventually(t, 2*time.Second, "B sees e2", func() bool { return rdsVectors(t, b) == 1 })
		if n, err := b.Purge(ctx, "t2"); n != 1 || err != nil {
			t.Fatalf("Purge = %d, %v", n, err)
		}
		rdsEventually(t, 2*time.Second, "Purge on B leaves A's index", func() bool { return rdsVectors(t, a) == 0 })
	})
}

func TestRedisLoadOnStart(t *testing.T) {
	_, c := startTestRedis(t)
	a := newTestRedisStore(t, c, RedisOptions{})
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(8, 8))
	type pv struct {
		e *Entry
		v []float32
	}
	var puts []pv
	for i := range 1200 { // more than one SCAN batch
		p := pv{rdsEntry("t", fmt.Sprint("s", i%7), fmt.Sprint(i)), rdsUnit(rng)}
		if err := a.Put(ctx, p.e, p.v, time.Minute); err != nil {
			t.Fatal(err)
		}
		puts = append(puts, p)
	}
	// Junk that the loader must skip: wrong dims, and a key of another prefix.
	c.HSet(ctx, "fd:v:junk", "vec", "abc", "scope", "s0")
	c.Set(ctx, "fd:v:string", "not a hash", 0)
	c.HSet(ctx, "other:v:x", "vec", string(vecBytes(puts[0].v)), "scope", "s0")
	late := newTestRedisStore(t, c, RedisOptions{})
	if n := late.idx.Load().Len(); n != len(puts) {
		t.Fatalf("loaded %d vectors, want %d", n, len(puts))
	}
	for _, p := range puts[:20] {
		if !rdsHasHit(late, p.e.Scope, p.v, p.e.ID) {
			t.Fatalf("entry %s not found after load", p.e.ID)
		}
	}
	// Entries put after the load arrive through the stream.
	e := rdsEntry("t", "s-new", "after")
	v := rdsUnit(rng)
	if err := a.Put(ctx, e, v, time.Minute); err != nil {
		t.Fatal(err)
	}
	rdsEventually(t, 2*time.Second, "late store sees a new Put", func() bool { return rdsHasHit(late, "s-new", v, e.ID) })
}

func TestRedisExpiryRemovesVectors(t *testing.T) {
	forEachRedisMode(t, func(t *testing.T, m redisMode) {
		r, c := m.start(t)
		a := newTestRedisStore(t, c, RedisOptions{VectorSearch: m.vs, sweepEvery: 50 * time.Millisecond})
		b := newTestRedisStore(t, newTestRedisClient(t, r.Addr(), time.Second), RedisOptions{VectorSearch: m.vs, sweepEvery: 50 * time.Millisecond})
		ctx := context.Background()
		rng := rand.New(rand.NewPCG(9, 9))
		e, v := rdsEntry("t", "s", "short"), rdsUnit(rng)
		if err := a.Put(ctx, e, v, 1500*time.Millisecond); err != nil {
			t.Fatal(err)
		}
		rdsEventually(t, 2*time.Second, "B sees the entry", func() bool { return rdsHasHit(b, "s", v, e.ID) })
		rdsEventually(t, 4*time.Second, "expired vectors leave both indexes", func() bool {
			return rdsVectors(t, a) == 0 && rdsVectors(t, b) == 0
		})
		for _, s := range []*RedisStore{a, b} {
			if ms, err := s.Search(ctx, "s", v, 3); err != nil || len(ms) != 0 {
				t.Fatalf("Search after expiry: %d, %v", len(ms), err)
			}
		}
	})
}

// TestRedisKilled kills Redis under two replicas: every call fails fast, and
// once Redis is back calls work again and the sync goroutine resumes.
func TestRedisKilled(t *testing.T) {
	forEachRedisMode(t, func(t *testing.T, m redisMode) {
		r, c := m.start(t)
		// The production default timeout: with Redis down, go-redis retries the
		// dial until the call's deadline.
		a := newTestRedisStore(t, c, RedisOptions{VectorSearch: m.vs, ReadTimeout: 50 * time.Millisecond})
		var syncErrs atomic.Int64
		b := newTestRedisStore(t, newTestRedisClient(t, r.Addr(), 100*time.Millisecond), RedisOptions{VectorSearch: m.vs,
			OnSyncError: func(error) { syncErrs.Add(1) }})
		ctx := context.Background()
		rng := rand.New(rand.NewPCG(10, 10))
		e, v := rdsEntry("t", "s", "before"), rdsUnit(rng)
		if err := a.Put(ctx, e, v, time.Minute); err != nil {
			t.Fatal(err)
		}
		rdsEventually(t, 2*time.Second, "B sees the entry", func() bool { return rdsHasHit(b, "s", v, e.ID) })

		r.Kill()
		calls := map[string]func() error{
			"Get":    func() error { _, err := a.Get(ctx, e.ExactKey); return err },
			"Put":    func() error { return a.Put(ctx, rdsEntry("t", "s", "x"), v, time.Minute) },
			"Search": func() error { _, err := a.Search(ctx, "s", v, 3); return err },
			"Delete": func() error { return a.Delete(ctx, e.ID) },
			"Purge":  func() error { _, err := a.Purge(ctx, "t"); return err },
			"Stats":  func() error { _, err := a.Stats(ctx); return err },
		}
		for round := range 3 {
			for name, call := range calls {
				start := time.Now()
				err := call()
				d := time.Since(start)
				if d > 200*time.Millisecond {
					t.Errorf("round %d: %s took %v with Redis down", round, name, d)
				}
				if round == 0 {
					t.Logf("%s with Redis down: %v", name, d.Round(time.Millisecond))
				}
				if err == nil || errors.Is(err, ErrNotFound) {
					t.Errorf("round %d: %s: err %v, want a connection error", round, name, err)
				}
			}
		}
		time.Sleep(300 * time.Millisecond) // the sync goroutines fail and back off
		// B's index sync says it is failing: in its health and to its owner.
		if h := b.IndexSync(); m.vs != modeLocal {
			if h != nil {
				t.Fatalf("IndexSync in %s mode: %+v, want nil", m.vs, h)
			}
		} else if h == nil || h.State != "failing" || h.Failures == 0 || h.LastError == "" || h.LastFail.IsZero() || syncErrs.Load() == 0 {
			t.Fatalf("IndexSync with Redis down: %+v, %d reported, want failing", h, syncErrs.Load())
		}

		r.Start() // empty again: the restart lost every key
		rdsEventually(t, 3*time.Second, "Put works after restart", func() bool {
			return a.Put(ctx, rdsEntry("t", "warmup", "w"), v, time.Minute) == nil
		})
		e2, v2 := rdsEntry("t", "s", "after"), rdsUnit(rng)
		if err := a.Put(ctx, e2, v2, time.Minute); err != nil {
			t.Fatal(err)
		}
		rdsEventually(t, 5*time.Second, "B sees a Put made after the restart", func() bool { return rdsHasHit(b, "s", v2, e2.ID) })
		if m.vs != modeLocal {
			return
		}
		if h := b.IndexSync(); h.State != "ok" || h.Resyncs == 0 {
			t.Fatalf("IndexSync after Redis came back empty: %+v, want ok after a reload", h)
		}
		// B reloaded: the vector lost with the restart is gone from its index.
		rdsEventually(t, 2*time.Second, "B dropped the lost vector", func() bool {
			for _, h := range b.idx.Load().Search("s", v, 5, time.Now()) {
				if h.ID == e.ID {
					return false
				}
			}
			return true
		})
		if got, err := b.Get(ctx, e2.ExactKey); err != nil || got.ID != e2.ID {
			t.Fatalf("Get on B: %v", err)
		}
		start := time.Now()
		_ = b.Close()
		if d := time.Since(start); d > time.Second {
			t.Fatalf("Close took %v", d)
		}
	})
}

func TestRedisStartWhileDown(t *testing.T) {
	r, c := startTestRedis(t)
	r.Kill()
	for _, mode := range []string{"auto", "local", "redisearch"} {
		start := time.Now()
		_, err := NewRedisStore(context.Background(), c, RedisOptions{Dims: rdsDims, VectorSearch: mode, ReadTimeout: 100 * time.Millisecond})
		if err == nil {
			t.Fatalf("%s: NewRedisStore succeeded with Redis down", mode)
		}
		if errors.Is(err, errNoVectorSearch) {
			t.Fatalf("%s: a connection error was taken for a missing module: %v", mode, err)
		}
		if d := time.Since(start); d > time.Second {
			t.Fatalf("%s: NewRedisStore took %v", mode, d)
		}
	}
}

// TestRedisAutoPicksLocal: Debian's redis-server has no search module. Set
// FRONTDOOR_TEST_REDIS_NO_VECTOR_ADDR to also check a server with an old
// module (e.g. redis-server --loadmodule /usr/lib/redis/modules/redisearch.so
// from Debian's redis-redisearch 1.2).
func TestRedisAutoPicksLocal(t *testing.T) {
	r := testenv.StartRedis(t)
	addrs := []string{r.Addr()}
	if a := os.Getenv("FRONTDOOR_TEST_REDIS_NO_VECTOR_ADDR"); a != "" {
		addrs = append(addrs, a)
	}
	for _, addr := range addrs {
		c := newTestRedisClient(t, addr, 100*time.Millisecond)
		prefix := fmt.Sprintf("fdtest%d:", rand.Uint64())
		s := newTestRedisStore(t, c, RedisOptions{VectorSearch: "auto", Prefix: prefix})
		if s.Mode() != "local" {
			t.Fatalf("%s: auto picked %q, want local", addr, s.Mode())
		}
		if st, err := s.Stats(context.Background()); err != nil || st.VectorSearchBy != "local" {
			t.Fatalf("%s: Stats = %+v, %v", addr, st, err)
		}
		_, err := NewRedisStore(context.Background(), c, RedisOptions{Dims: rdsDims, VectorSearch: "redisearch", Prefix: prefix})
		if !errors.Is(err, errNoVectorSearch) {
			t.Fatalf("%s: vector_search redisearch: %v, want errNoVectorSearch", addr, err)
		}
	}
}

func TestRedisCloseNoLeak(t *testing.T) {
	_, c := startTestRedis(t)
	if err := c.Ping(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	before := runtime.NumGoroutine()
	for range 3 {
		s, err := NewRedisStore(context.Background(), c, RedisOptions{Dims: rdsDims, VectorSearch: "local", SyncInterval: 50 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
		start := time.Now()
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		if d := time.Since(start); d > 500*time.Millisecond {
			t.Fatalf("Close took %v", d)
		}
		_ = s.Close() // idempotent
	}
	rdsEventually(t, time.Second, "goroutines return to the baseline", func() bool { return runtime.NumGoroutine() <= before })
}

func TestRedisStreamIDOrder(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want int
	}{
		{"1-0", "1-0", 0}, {"1-1", "1-0", 1}, {"2-0", "10-0", -1}, {"0-0", "1700000000000-3", -1},
	} {
		if got := compareStreamIDs(tc.a, tc.b); got != tc.want {
			t.Errorf("compareStreamIDs(%s, %s) = %d", tc.a, tc.b, got)
		}
	}
	for _, ref := range [][2]string{{"", ""}, {"ns", "key"}, {"a\x00b", ""}, {"", "k"}} {
		if ns, key := decodeRef(encodeRef(ref[0], ref[1])); ns != ref[0] || key != ref[1] {
			t.Errorf("ref %q round trip: %q, %q", ref, ns, key)
		}
	}
	if ns, key := decodeRef([]byte{200}); ns != "" || key != "" {
		t.Error("corrupt ref decoded")
	}
	if got := escapeGlob(`fd*?[x]\:`); got != `fd\*\?\[x\]\\:` {
		t.Errorf("escapeGlob = %q", got)
	}
}

func BenchmarkRedisGet(b *testing.B) {
	r := testenv.StartRedis(b)
	s := newTestRedisStore(b, newTestRedisClient(b, r.Addr(), 100*time.Millisecond), RedisOptions{})
	ctx := context.Background()
	for _, size := range []int{500, 8000} {
		e := rdsEntry("t", "", strings.Repeat("lorem ipsum dolor sit amet ", size/27))
		if err := s.Put(ctx, e, nil, time.Minute); err != nil {
			b.Fatal(err)
		}
		b.Run(fmt.Sprint(size), func(b *testing.B) {
			for b.Loop() {
				if _, err := s.Get(ctx, e.ExactKey); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkRedisPut(b *testing.B) {
	r := testenv.StartRedis(b)
	s := newTestRedisStore(b, newTestRedisClient(b, r.Addr(), 100*time.Millisecond), RedisOptions{Dims: 512})
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(11, 11))
	vec := make([]float32, 512)
	for i := range vec {
		vec[i] = float32(rng.NormFloat64())
	}
	rdsNormalize(vec)
	content := strings.Repeat("lorem ipsum dolor sit amet ", 2000/27)
	b.Run("exact", func(b *testing.B) {
		for b.Loop() {
			if err := s.Put(ctx, rdsEntry("t", "", content), nil, time.Minute); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("semantic", func(b *testing.B) {
		i := 0
		for b.Loop() {
			i++
			if err := s.Put(ctx, rdsEntry("t", fmt.Sprint("s", i%1000), content), vec, time.Minute); err != nil {
				b.Fatal(err)
			}
		}
	})
	// A scope of 1000 vectors: an exact scan, then one pipelined HGET of k entries.
	for range 1000 {
		v := make([]float32, 512)
		for i := range v {
			v[i] = float32(rng.NormFloat64())
		}
		if err := s.Put(ctx, rdsEntry("t", "s1000", content), rdsNormalize(v), time.Minute); err != nil {
			b.Fatal(err)
		}
	}
	b.Run("search_local_1000", func(b *testing.B) {
		for b.Loop() {
			if ms, err := s.Search(ctx, "s1000", vec, 3); err != nil || len(ms) != 3 {
				b.Fatal(len(ms), err)
			}
		}
	})
}
