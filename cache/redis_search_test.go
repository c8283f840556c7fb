package cache

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"frontdoor/internal/testenv"
)

// --- pure parts: always run ---

func TestRedisSearchEscapeTag(t *testing.T) {
	for in, want := range map[string]string{
		"9f86d081884c7d65": "9f86d081884c7d65",
		"Ab_9":             "Ab_9",
		"a-b.c:d":          `a\-b\.c\:d`,
		"x y":              `x\ y`,
		"}{|)(@*":          `\}\{\|\)\(\@\*`,
		`back\slash`:       `back\\slash`,
		"":                 `\ `,
		"é字":               "é字",
	} {
		if got := escapeTag(in); got != want {
			t.Errorf("escapeTag(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestRedisSearchKNNQuery(t *testing.T) {
	flat := RedisIndexConfig{Type: "flat", BatchSize: 64}
	if got, want := knnQuery("9f86d0", 3, flat, -1), "(@scope:{9f86d0})=>[KNN 3 @vec $B BATCH_SIZE 64 AS dist]"; got != want {
		t.Fatalf("knnQuery = %q, want %q", got, want)
	}
	hnsw := RedisIndexConfig{Type: "hnsw", EFRuntime: 40, BatchSize: 64}
	for size, want := range map[int]string{
		0:    `(@scope:{a\}b})=>[KNN 1 @vec $B HYBRID_POLICY ADHOC_BF AS dist]`,
		1024: `(@scope:{a\}b})=>[KNN 1 @vec $B HYBRID_POLICY ADHOC_BF AS dist]`,
		-1:   `(@scope:{a\}b})=>[KNN 1 @vec $B EF_RUNTIME 40 BATCH_SIZE 64 AS dist]`,
		1025: `(@scope:{a\}b})=>[KNN 1 @vec $B EF_RUNTIME 40 HYBRID_POLICY BATCHES BATCH_SIZE 64 AS dist]`,
	} {
		if got := knnQuery("a}b", 1, hnsw, size); got != want {
			t.Errorf("size %d: knnQuery = %q, want %q", size, got, want)
		}
	}
}

// TestRedisSearchSmallAndLargeScopes: a scope past scanMax is searched in
// the graph, a small one scanned; both find their nearest entry, and the
// sizes are counted in RediSearch.
func TestRedisSearchSmallAndLargeScopes(t *testing.T) {
	_, c := searchServer(t)
	s := newTestRedisStore(t, c, RedisOptions{VectorSearch: "redisearch"})
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(34, 34))
	var ws []Write
	for i := range scanMax + 100 {
		ws = append(ws, Write{Entry: rdsEntry("t", "big", fmt.Sprint(i)), Vec: rdsUnit(rng), TTL: time.Minute})
	}
	for i := range 3 {
		ws = append(ws, Write{Entry: rdsEntry("t", "small", fmt.Sprint(i)), Vec: rdsUnit(rng), TTL: time.Minute})
	}
	for i := 0; i < len(ws); i += 64 {
		if err := s.PutBatch(ctx, ws[i:min(i+64, len(ws))]); err != nil {
			t.Fatal(err)
		}
	}
	if n := s.scopeSize(ctx, "big"); n != scanMax+100 {
		t.Fatalf("big scope counted %d", n)
	}
	if n := s.scopeSize(ctx, "small"); n != 3 {
		t.Fatalf("small scope counted %d", n)
	}
	for _, w := range []Write{ws[7], ws[scanMax+50], ws[len(ws)-1]} {
		if !rdsHasHit(s, w.Entry.Scope, rdsNear(rng, w.Vec), w.Entry.ID) {
			t.Fatalf("%s: entry %s not found", w.Entry.Scope, w.Entry.ID)
		}
	}
}

func TestRedisSearchParseKNNDocs(t *testing.T) {
	docs := []redis.Document{
		{ID: "fd:v:aa", Fields: map[string]string{"entry": "P1", "dist": "0.02"}},
		{ID: "fd:v:bb", Fields: map[string]string{"entry": "P2", "dist": "0.5"}},
		{ID: "fd:v:gone", Fields: map[string]string{}, Error: redis.Nil}, // expired mid-query
		{ID: "fd:v:nodist", Fields: map[string]string{"entry": "P3"}},
		{ID: "fd:v:baddist", Fields: map[string]string{"entry": "P4", "dist": "x"}},
	}
	got := parseKNNDocs(docs, "fd:v:")
	if len(got) != 2 {
		t.Fatalf("parsed %d hits, want 2: %+v", len(got), got)
	}
	if got[0].id != "aa" || got[0].payload != "P1" || got[0].similarity < 0.979 || got[0].similarity > 0.981 {
		t.Fatalf("hit 0 = %+v", got[0])
	}
	if got[1].id != "bb" || got[1].similarity != 0.5 {
		t.Fatalf("hit 1 = %+v", got[1])
	}
}

// --- a real RediSearch (the module in shared/redis-modules) ---

func searchServer(t *testing.T) (*testenv.Redis, redis.UniversalClient) {
	r := testenv.StartRediSearch(t)
	return r, newTestRedisClient(t, r.Addr(), time.Second)
}

func ftList(t *testing.T, c redis.UniversalClient) []string {
	t.Helper()
	names, err := c.FT_List(context.Background()).Result()
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(names)
	return names
}

// ftVectorParams reads the parameters of an index's vector field.
func ftVectorParams(t *testing.T, c redis.UniversalClient, index string) string {
	t.Helper()
	raw, err := c.Do(context.Background(), "FT.DEBUG", "VECSIM_INFO", index, "vec").Slice()
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprint(raw)
}

// TestRedisSearchIndex: the index's name carries the embedder and its
// dims, its parameters come from the config, a changed embedder gets an
// index of its own, and FLAT works too.
func TestRedisSearchIndex(t *testing.T) {
	_, c := searchServer(t)
	hnsw := newTestRedisStore(t, c, RedisOptions{VectorSearch: "redisearch", Embedder: "local-64",
		Index: RedisIndexConfig{Type: "hnsw", M: 24, EFConstruction: 150, EFRuntime: 33, BatchSize: 64}})
	if got, want := hnsw.IndexName(), "fd:idx:local-64:64"; got != want {
		t.Fatalf("index name %q, want %q", got, want)
	}
	info := ftVectorParams(t, c, hnsw.IndexName())
	for _, want := range []string{"ALGORITHM HNSW", "M 24", "EF_CONSTRUCTION 150", "EF_RUNTIME 33", "DIMENSION 64"} {
		if !strings.Contains(info, want) {
			t.Errorf("FT.INFO lacks %q: %s", want, info)
		}
	}
	other := newTestRedisStore(t, c, RedisOptions{VectorSearch: "redisearch", Embedder: "openai:text-embedding-v4", Dims: 32})
	flat := newTestRedisStore(t, c, RedisOptions{VectorSearch: "redisearch", Embedder: "flat", Index: RedisIndexConfig{Type: "flat", M: 16, EFConstruction: 200, EFRuntime: 10, BatchSize: 64}})
	if got := ftList(t, c); !slices.Equal(got, []string{"fd:idx:flat:64", "fd:idx:local-64:64", "fd:idx:openai_text-embedding-v4:32"}) {
		t.Fatalf("FT._LIST = %q", got)
	}
	if info := ftVectorParams(t, c, flat.IndexName()); !strings.Contains(info, "FLAT") {
		t.Fatalf("flat index: %s", info)
	}
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(30, 30))
	for _, s := range []*RedisStore{hnsw, flat} {
		e, v := rdsEntry("t", "s", "x"), rdsUnit(rng)
		if err := s.Put(ctx, e, v, time.Minute); err != nil {
			t.Fatal(err)
		}
		if !rdsHasHit(s, "s", v, e.ID) {
			t.Fatalf("%s: entry not found", s.IndexName())
		}
	}
	// The 32-dim space never sees the 64-dim vectors.
	if ms, err := other.Search(ctx, "s", rdsUnit(rng)[:32], 5); err != nil || len(ms) != 0 {
		t.Fatalf("other embedder's index: %d matches, %v", len(ms), err)
	}
}

// TestRedisSearchReplicasStartTogether: replicas that start at the same
// time create the index once and all use it.
func TestRedisSearchReplicasStartTogether(t *testing.T) {
	r, _ := searchServer(t)
	const n = 4
	stores := make([]*RedisStore, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			c := newTestRedisClient(t, r.Addr(), time.Second)
			stores[i], errs[i] = NewRedisStore(context.Background(), c, RedisOptions{Prefix: "fd:", Dims: rdsDims, VectorSearch: "auto"})
		}()
	}
	close(start)
	wg.Wait()
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("replica %d: %v", i, errs[i])
		}
		defer stores[i].Close()
		if stores[i].Mode() != "redisearch" {
			t.Fatalf("replica %d: mode %q", i, stores[i].Mode())
		}
	}
	c := newTestRedisClient(t, r.Addr(), time.Second)
	if got := ftList(t, c); len(got) != 1 {
		t.Fatalf("FT._LIST = %q, want one index", got)
	}
	ctx := context.Background()
	e, v := rdsEntry("t", "s", "x"), rdsUnit(rand.New(rand.NewPCG(31, 31)))
	if err := stores[0].Put(ctx, e, v, time.Minute); err != nil {
		t.Fatal(err)
	}
	for i, s := range stores {
		if !rdsHasHit(s, "s", v, e.ID) {
			t.Fatalf("replica %d does not find replica 0's entry", i)
		}
	}
}

// TestRedisSearchOldModule: Debian's RediSearch 1.2 has FT.* but no vector
// fields. auto falls back to the in-process index and says why;
// redisearch refuses to start.
func TestRedisSearchOldModule(t *testing.T) {
	r := testenv.StartRedis(t, "--loadmodule", testenv.DebianRediSearch(t))
	c := newTestRedisClient(t, r.Addr(), time.Second)
	s := newTestRedisStore(t, c, RedisOptions{VectorSearch: "auto"})
	if s.Mode() != "local" || !strings.Contains(s.Fallback(), "no RediSearch with vector support") {
		t.Fatalf("mode %q, fallback %q", s.Mode(), s.Fallback())
	}
	_, err := NewRedisStore(context.Background(), c, RedisOptions{Dims: rdsDims, VectorSearch: "redisearch"})
	if !errors.Is(err, errNoVectorSearch) {
		t.Fatalf("vector_search redisearch: %v, want errNoVectorSearch", err)
	}
}

// TestRedisEviction runs Redis as our design notes do, with a small
// maxmemory and allkeys-lru: an evicted entry is a miss, never an error,
// and a search result whose entry is gone is skipped for the next one.
func TestRedisEviction(t *testing.T) {
	forEachRedisMode(t, func(t *testing.T, m redisMode) {
		t.Parallel() // a server each; the modes run side by side
		r, c := m.start(t)
		ctx := context.Background()
		if err := c.ConfigSet(ctx, "maxmemory-policy", "allkeys-lru").Err(); err != nil {
			t.Fatal(err)
		}
		// No room reserved up front: it counts against maxmemory.
		ix := DefaultConfig().RedisIndex
		ix.InitialCap = 0
		// Eviction is tested here, not timeouts: reads queue behind each
		// other's searches on Redis's one thread.
		s := newTestRedisStore(t, c, RedisOptions{VectorSearch: m.vs, ReadTimeout: 5 * time.Second, WriteTimeout: 5 * time.Second, Index: ix})
		used, err := c.Info(ctx, "memory").Result()
		if err != nil {
			t.Fatal(err)
		}
		base := infoInt(used, "used_memory")
		if err := c.ConfigSet(ctx, "maxmemory", strconv.FormatInt(base+2<<20, 10)).Err(); err != nil {
			t.Fatal(err)
		}
		rng := rand.New(rand.NewPCG(32, 32))
		var keys []string
		var vecs [][]float32
		big := strings.Repeat("lorem ipsum ", 200)
		for i := range 3000 {
			e, v := rdsEntry("t", "s", fmt.Sprint(i, big)), rdsUnit(rng)
			if err := s.Put(ctx, e, v, time.Hour); err != nil {
				t.Fatalf("Put %d under maxmemory: %v", i, err)
			}
			keys, vecs = append(keys, e.ExactKey), append(vecs, v)
		}
		stats, _ := c.Info(ctx, "stats").Result()
		if infoInt(stats, "evicted_keys") == 0 {
			t.Fatal("nothing was evicted: the test does not test eviction")
		}
		// Every entry is read back, by 4 readers at once: the round trips
		// overlap.
		var misses atomic.Int64
		var wg sync.WaitGroup
		for w := range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := w; i < len(keys); i += 4 {
					_, err := s.Get(ctx, keys[i])
					switch {
					case errors.Is(err, ErrNotFound):
						misses.Add(1)
					case err != nil:
						t.Errorf("Get of a possibly evicted entry: %v", err)
						return
					}
					if _, err := s.Search(ctx, "s", vecs[i], 3); err != nil {
						t.Errorf("Search with evicted entries: %v", err)
						return
					}
				}
			}()
		}
		wg.Wait()
		if t.Failed() {
			return
		}
		if misses.Load() == 0 {
			t.Fatal("no exact entry was evicted")
		}
		_ = r
	})
}

// TestRedisSearchSkipsGoneEntries: when the best match's hash is gone
// (evicted, deleted by hand), the next candidate is returned.
func TestRedisSearchSkipsGoneEntries(t *testing.T) {
	forEachRedisMode(t, func(t *testing.T, m redisMode) {
		_, c := m.start(t)
		s := newTestRedisStore(t, c, RedisOptions{VectorSearch: m.vs})
		ctx := context.Background()
		rng := rand.New(rand.NewPCG(33, 33))
		q := rdsUnit(rng)
		best, next := rdsEntry("t", "s", "best"), rdsEntry("t", "s", "next")
		if err := s.Put(ctx, best, rdsNear(rng, q), time.Minute); err != nil {
			t.Fatal(err)
		}
		if err := s.Put(ctx, next, rdsNear(rng, rdsNear(rng, q)), time.Minute); err != nil {
			t.Fatal(err)
		}
		if ms, err := s.Search(ctx, "s", q, 2); err != nil || len(ms) != 2 || ms[0].Entry.ID != best.ID {
			t.Fatalf("before: %+v, %v", ms, err)
		}
		if err := c.Del(ctx, s.vecKey(best.ID)).Err(); err != nil { // as an eviction would
			t.Fatal(err)
		}
		ms, err := s.Search(ctx, "s", q, 2)
		if err != nil || len(ms) != 1 || ms[0].Entry.ID != next.ID {
			t.Fatalf("after the best entry is gone: %+v, %v", ms, err)
		}
	})
}

func infoInt(info, field string) int64 {
	for _, line := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	return 0
}
