package cache

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"frontdoor/internal/redisconn"
	"frontdoor/internal/testenv"
	"frontdoor/internal/units"
)

const clusterTimeout = 500 * time.Millisecond // per call, under -race on 2 shared cores

// newClusterClient builds the gateway's client for a redis.addrs list.
func newClusterClient(t *testing.T, cl *testenv.RedisCluster) *redis.ClusterClient {
	t.Helper()
	c, err := redisconn.New(redisconn.Config{Addrs: cl.Addrs(), KeyPrefix: "fd:", Timeout: units.Duration(clusterTimeout)}, "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	cc, ok := c.(*redis.ClusterClient)
	if !ok {
		t.Fatalf("redisconn.New with addrs built a %T, want *redis.ClusterClient", c)
	}
	return cc
}

func newClusterStore(t *testing.T, c redis.UniversalClient, prefix string, opt RedisOptions) *RedisStore {
	t.Helper()
	opt.Prefix, opt.ReadTimeout = prefix, clusterTimeout
	return newTestRedisStore(t, c, opt)
}

// keysPerMaster counts the keys matching pattern on each master.
func keysPerMaster(t *testing.T, c *redis.ClusterClient, pattern string) []int {
	t.Helper()
	var mu sync.Mutex
	var counts []int
	err := c.ForEachMaster(context.Background(), func(ctx context.Context, m *redis.Client) error {
		keys, err := m.Keys(ctx, pattern).Result()
		mu.Lock()
		counts = append(counts, len(keys))
		mu.Unlock()
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return counts
}

// onEveryMaster fails unless each of the three masters holds some keys
// matching pattern.
func onEveryMaster(t *testing.T, c *redis.ClusterClient, pattern string) {
	t.Helper()
	counts := keysPerMaster(t, c, pattern)
	if len(counts) != 3 {
		t.Fatalf("%d masters, want 3", len(counts))
	}
	for _, n := range counts {
		if n == 0 {
			t.Fatalf("keys %s per master: %v, want some on every master", pattern, counts)
		}
	}
}

// clusterRefusesRediSearch: vector_search redisearch fails on a cluster,
// naming the setting and the cluster.
func clusterRefusesRediSearch(t *testing.T, c redis.UniversalClient, prefix string) {
	t.Helper()
	s, err := NewRedisStore(context.Background(), c, RedisOptions{Dims: rdsDims, VectorSearch: "redisearch", Prefix: prefix, ReadTimeout: clusterTimeout})
	if err == nil {
		_ = s.Close()
		t.Fatalf("vector_search redisearch on a cluster: mode %q, want an error", s.Mode())
	}
	if msg := err.Error(); !strings.Contains(msg, "vector_search redisearch") || !strings.Contains(strings.ToLower(msg), "cluster") {
		t.Fatalf("vector_search redisearch on a cluster: %v, want an error naming the setting and the cluster", err)
	}
}

func clusterStats(t *testing.T, s *RedisStore) Stats {
	t.Helper()
	st, err := s.Stats(context.Background())
	if err != nil {
		t.Fatalf("Stats: %v", err)
	}
	return st
}

// TestRedisCluster runs the Redis store against a 3-master Redis Cluster
// (one for every subtest; each subtest has its own key prefix).
func TestRedisCluster(t *testing.T) {
	cl := testenv.StartRedisCluster(t, 3)
	ctx := context.Background()

	t.Run("exact entries, delete, purge and stats", func(t *testing.T) {
		c := newClusterClient(t, cl)
		s := newClusterStore(t, c, "fd:x:", RedisOptions{})
		rng := rand.New(rand.NewPCG(11, 11))
		var exact, vecs []*Entry
		for i := range 100 {
			e := rdsEntry("ta", "", fmt.Sprint("exact ", i))
			if err := s.Put(ctx, e, nil, time.Minute); err != nil {
				t.Fatal(err)
			}
			exact = append(exact, e)
		}
		for i := range 50 {
			e := rdsEntry("tb", "s", fmt.Sprint("semantic ", i))
			if err := s.Put(ctx, e, rdsUnit(rng), time.Minute); err != nil {
				t.Fatal(err)
			}
			vecs = append(vecs, e)
		}
		onEveryMaster(t, c, "fd:x:e:*")
		onEveryMaster(t, c, "fd:x:v:*")
		for _, e := range append(exact, vecs...) {
			got, err := s.Get(ctx, e.ExactKey)
			if err != nil {
				t.Fatalf("Get %s: %v", e.ExactKey, err)
			}
			rdsSameEntry(t, got, e)
		}
		// GetMany's pipeline runs on each master its keys live on.
		keys := []string{"missing"}
		for _, e := range exact {
			keys = append(keys, e.ExactKey)
		}
		many, err := s.GetMany(ctx, keys)
		if err != nil || len(many) != len(keys) || many[0] != nil {
			t.Fatalf("GetMany: %v, %d entries for %d keys", err, len(many), len(keys))
		}
		for i, e := range exact {
			rdsSameEntry(t, many[i+1], e)
		}
		if st := clusterStats(t, s); st.Entries != 150 || st.VectorEntries != 50 || st.Scopes != 1 || st.VectorSearchBy != "local" {
			t.Fatalf("Stats = %+v, want 150 entries, 50 vectors in 1 scope, local", st)
		}

		if err := s.Delete(ctx, exact[0].ID); err != nil {
			t.Fatalf("Delete: %v", err)
		}
		if _, err := s.Get(ctx, exact[0].ExactKey); !errors.Is(err, ErrNotFound) {
			t.Fatalf("Get after Delete: %v, want ErrNotFound", err)
		}
		if err := s.Delete(ctx, exact[0].ID); !errors.Is(err, ErrNotFound) {
			t.Fatalf("second Delete: %v, want ErrNotFound", err)
		}

		if n, err := s.Purge(ctx, "tb"); n != 50 || err != nil {
			t.Fatalf("Purge tb = %d, %v; want 50", n, err)
		}
		if ms, err := s.Search(ctx, "s", rdsUnit(rng), 5); len(ms) != 0 || err != nil {
			t.Fatalf("Search after Purge: %d matches, %v", len(ms), err)
		}
		for _, e := range exact[1:] {
			if _, err := s.Get(ctx, e.ExactKey); err != nil {
				t.Fatalf("the other namespace lost %s: %v", e.ExactKey, err)
			}
		}
		if st := clusterStats(t, s); st.Entries != 99 || st.VectorEntries != 0 {
			t.Fatalf("Stats after Purge = %+v, want 99 entries, no vectors", st)
		}
		if n, err := s.Purge(ctx, "ta"); n != 99 || err != nil {
			t.Fatalf("Purge ta = %d, %v; want 99", n, err)
		}
		for _, pattern := range []string{"fd:x:e:*", "fd:x:id:*", "fd:x:v:*"} {
			for _, n := range keysPerMaster(t, c, pattern) {
				if n != 0 {
					t.Fatalf("keys %s left after Purge: %v", pattern, keysPerMaster(t, c, pattern))
				}
			}
		}
	})

	t.Run("vector_search auto picks local, redisearch fails", func(t *testing.T) {
		c := newClusterClient(t, cl)
		s := newClusterStore(t, c, "fd:m:", RedisOptions{VectorSearch: "auto"})
		if s.Mode() != "local" || !strings.Contains(strings.ToLower(s.Fallback()), "cluster") {
			t.Fatalf("auto on an open-source cluster: mode %q, fallback %q; want local, naming the cluster", s.Mode(), s.Fallback())
		}
		if st := clusterStats(t, s); st.VectorSearchBy != "local" {
			t.Fatalf("Stats.VectorSearchBy = %q, want local", st.VectorSearchBy)
		}
		clusterRefusesRediSearch(t, c, "fd:m:")
	})

	// Each replica's Put must reach the other's index. A cluster pipeline
	// runs its commands on the masters concurrently, so an "add" event sent
	// in the Put's pipeline may be read, and its vector fetched, before the
	// vector is written on another master: the event is then lost. 200 Puts
	// show such losses every time (a few per run) while they happen.
	t.Run("two replicas share vectors through the events stream", func(t *testing.T) {
		a := newClusterStore(t, newClusterClient(t, cl), "fd:r:", RedisOptions{})
		b := newClusterStore(t, newClusterClient(t, cl), "fd:r:", RedisOptions{})
		rng := rand.New(rand.NewPCG(12, 12))
		const n = 100
		type put struct {
			e      *Entry
			v      []float32
			by, in *RedisStore
		}
		var puts []put
		for i := range n {
			for _, p := range []put{{rdsEntry("ta", "s", fmt.Sprint("from A ", i)), rdsUnit(rng), a, b}, {rdsEntry("tb", "s", fmt.Sprint("from B ", i)), rdsUnit(rng), b, a}} {
				if err := p.by.Put(ctx, p.e, p.v, time.Minute); err != nil {
					t.Fatal(err)
				}
				puts = append(puts, p)
			}
		}
		deadline := time.Now().Add(2 * time.Second)
		for {
			na, nb := clusterStats(t, a).VectorEntries, clusterStats(t, b).VectorEntries
			if na == 2*n && nb == 2*n {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("after 2s replica A indexes %d vectors, B %d; want %d each", na, nb, 2*n)
			}
			time.Sleep(20 * time.Millisecond)
		}
		for i, p := range puts {
			if !rdsHasHit(p.in, "s", rdsNear(rng, p.v), p.e.ID) {
				t.Fatalf("Put %d is not a hit on the other replica", i)
			}
		}
		if err := a.Delete(ctx, puts[1].e.ID); err != nil { // B's entry, deleted on A
			t.Fatal(err)
		}
		rdsEventually(t, 2*time.Second, "Delete on A leaves B's index", func() bool { return clusterStats(t, b).VectorEntries == 2*n-1 })
		if m, err := b.Purge(ctx, "ta"); m != n || err != nil {
			t.Fatalf("Purge = %d, %v; want %d", m, err, n)
		}
		rdsEventually(t, 2*time.Second, "Purge on B leaves A's index", func() bool { return clusterStats(t, a).VectorEntries == n-1 })
	})

	t.Run("a store started later loads vectors from every master", func(t *testing.T) {
		c := newClusterClient(t, cl)
		a := newClusterStore(t, c, "fd:l:", RedisOptions{})
		rng := rand.New(rand.NewPCG(13, 13))
		const n = 300
		es, vs := make([]*Entry, n), make([][]float32, n)
		for i := range n {
			es[i], vs[i] = rdsEntry("t", fmt.Sprint("s", i%5), fmt.Sprint(i)), rdsUnit(rng)
			if err := a.Put(ctx, es[i], vs[i], time.Minute); err != nil {
				t.Fatal(err)
			}
		}
		onEveryMaster(t, c, "fd:l:v:*")
		late := newClusterStore(t, newClusterClient(t, cl), "fd:l:", RedisOptions{})
		// Loaded by NewRedisStore itself: the stream only brings later events.
		if st := clusterStats(t, late); st.VectorEntries != n || st.Scopes != 5 {
			t.Fatalf("late store loaded %d vectors in %d scopes, want %d in 5", st.VectorEntries, st.Scopes, n)
		}
		for i := 0; i < n; i += 10 {
			if !rdsHasHit(late, es[i].Scope, vs[i], es[i].ID) {
				t.Fatalf("entry %d not found by the late store", i)
			}
		}
	})

	t.Run("entries expire", func(t *testing.T) {
		a := newClusterStore(t, newClusterClient(t, cl), "fd:e:", RedisOptions{sweepEvery: 50 * time.Millisecond})
		b := newClusterStore(t, newClusterClient(t, cl), "fd:e:", RedisOptions{sweepEvery: 50 * time.Millisecond})
		rng := rand.New(rand.NewPCG(14, 14))
		const ttl = time.Second
		var es []*Entry
		var vs [][]float32
		start := time.Now()
		for i := range 12 { // over all three masters
			e, v := rdsEntry("t", "s", fmt.Sprint("short ", i)), rdsUnit(rng)
			if err := a.Put(ctx, e, v, ttl); err != nil {
				t.Fatal(err)
			}
			es, vs = append(es, e), append(vs, v)
		}
		lastPut := time.Now()
		if _, err := a.Get(ctx, es[0].ExactKey); err != nil && time.Since(start) < ttl {
			t.Fatalf("Get before the TTL: %v", err)
		}
		rdsEventually(t, time.Until(start.Add(ttl)), "B sees the entries before they expire", func() bool {
			return rdsHasHit(b, "s", vs[len(vs)-1], es[len(es)-1].ID)
		})
		// Each entry's TTL runs from its own Put: wait for the last one's.
		time.Sleep(time.Until(lastPut.Add(ttl + 100*time.Millisecond)))
		for i, e := range es {
			if _, err := a.Get(ctx, e.ExactKey); !errors.Is(err, ErrNotFound) {
				t.Fatalf("Get %d after the TTL: %v, want ErrNotFound", i, err)
			}
			if ms, err := b.Search(ctx, "s", vs[i], 3); len(ms) != 0 || err != nil {
				t.Fatalf("Search %d after the TTL: %d matches, %v", i, len(ms), err)
			}
		}
		if st := clusterStats(t, a); st.Entries != 0 {
			t.Fatalf("Stats after the TTL: %d entries, want 0", st.Entries)
		}
		rdsEventually(t, 2*time.Second, "expired vectors leave both indexes", func() bool {
			return clusterStats(t, a).VectorEntries == 0 && clusterStats(t, b).VectorEntries == 0
		})
	})
}

// TestRedisClusterSearchModule: RediSearch loaded on every node of an
// open-source cluster answers FT.* but indexes only the keys of the node
// that ran FT.CREATE, so a search would miss most entries. auto must choose
// the in-process index and say why; redisearch must fail.
func TestRedisClusterSearchModule(t *testing.T) {
	cl := testenv.StartRedisCluster(t, 3, "--loadmodule", testenv.RediSearchModule(t))
	ctx := context.Background()
	c := newClusterClient(t, cl)
	s := newClusterStore(t, c, "fd:", RedisOptions{VectorSearch: "auto"})
	if s.Mode() != "local" || !strings.Contains(strings.ToLower(s.Fallback()), "cluster") {
		t.Fatalf("auto on a cluster with the search module: mode %q, fallback %q; want local, naming the cluster", s.Mode(), s.Fallback())
	}
	rng := rand.New(rand.NewPCG(15, 15))
	const n = 30
	es, vs := make([]*Entry, n), make([][]float32, n)
	for i := range n {
		es[i], vs[i] = rdsEntry("t", "s", fmt.Sprint(i)), rdsUnit(rng)
		if err := s.Put(ctx, es[i], vs[i], time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	onEveryMaster(t, c, "fd:v:*")
	for i := range n {
		if !rdsHasHit(s, "s", vs[i], es[i].ID) {
			t.Fatalf("entry %d not found", i)
		}
	}
	clusterRefusesRediSearch(t, c, "fd:")
}
