package cache

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"frontdoor/embed"
	"frontdoor/internal/testenv"
)

const memBenchDims = 512 // the default embedder size

// BenchmarkSemanticSearch measures MemoryStore.Search (index scan plus entry
// resolution) over one scope of n random unit vectors, k=4, and reports the
// p99 latency of single queries.
func BenchmarkSemanticSearch(b *testing.B) {
	for _, n := range []int{1_000, 10_000, 100_000} {
		b.Run(fmt.Sprintf("n=%dk", n/1000), func(b *testing.B) {
			ctx := context.Background()
			rng := rand.New(rand.NewPCG(uint64(n), 1))
			m := NewMemoryStore(0, memBenchDims)
			defer m.Close()
			for i := range n {
				e := &Entry{ID: fmt.Sprint("e", i), Namespace: "ns", Scope: "s", Content: "answer"}
				if err := m.Put(ctx, e, memUnit(rng, memBenchDims), time.Hour); err != nil {
					b.Fatal(err)
				}
			}
			queries := make([][]float32, 1024)
			for i := range queries {
				queries[i] = memUnit(rng, memBenchDims)
			}
			search := func(i int) {
				ms, err := m.Search(ctx, "s", queries[i%len(queries)], 4)
				if err != nil || len(ms) != 4 {
					b.Fatalf("Search = %d matches, %v", len(ms), err)
				}
			}
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				search(i)
				i++
			}
			benchP99(b, 2000, search)
		})
	}
}

// benchP99 times n single calls of fn and reports their 99th percentile.
func benchP99(b *testing.B, n int, fn func(i int)) {
	b.Helper()
	lat := make([]time.Duration, n)
	for i := range lat {
		start := time.Now()
		fn(i)
		lat[i] = time.Since(start)
	}
	slices.Sort(lat)
	b.ReportMetric(float64(lat[n*99/100])/float64(time.Microsecond), "p99-µs")
}

// BenchmarkMemoryGetHit measures parallel exact-key hits.
func BenchmarkMemoryGetHit(b *testing.B) {
	const n = 10_000
	ctx := context.Background()
	m := NewMemoryStore(1<<30, memBenchDims)
	defer m.Close()
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("key-%05d", i)
		if err := m.Put(ctx, &Entry{ID: NewEntryID(), Namespace: "ns", ExactKey: keys[i], Content: "answer"}, nil, time.Hour); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := rand.IntN(n)
		for pb.Next() {
			if _, err := m.Get(ctx, keys[i%n]); err != nil {
				b.Error(err)
				return
			}
			i++
		}
	})
}

// BenchmarkIndexMiss measures what a semantic cache miss asks of the
// index: a search of one scope of n vectors (k=4) and the insert of the
// query's vector after it. "near" queries have a stored twin at cosine
// 0.97 (the miss path's near-identical prompts, rejected by a guard);
// "far" ones are unrelated.
func BenchmarkIndexMiss(b *testing.B) {
	const n = 100_000
	rng := rand.New(rand.NewPCG(7, 8))
	queries := make(map[string][][]float32)
	random := NewVectorIndex(memBenchDims)
	for i := range n {
		v := memUnit(rng, memBenchDims)
		random.Add("s", fmt.Sprint("e", i), v, time.Time{})
		if i < 4096 {
			queries["near"] = append(queries["near"], viNear(rng, v, 0.97))
			queries["far"] = append(queries["far"], memUnit(rng, memBenchDims))
		}
	}
	// bench/misspath's prompts, embedded by the local embedder: a scope of
	// near-identical texts that differ in one number.
	emb := embed.NewLocal(memBenchDims)
	prompt := func(i int) []float32 {
		v, _ := emb.Embed(context.Background(), fmt.Sprintf("Order %d: what is the capital of France? Answer in one word.", i))
		return v
	}
	prompts := NewVectorIndex(memBenchDims)
	for i := range n {
		prompts.Add("s", fmt.Sprint("e", i), prompt(i), time.Time{})
	}
	for i := range 4096 {
		queries["prompts"] = append(queries["prompts"], prompt(n+i))
	}
	id := 0
	for _, kind := range []string{"far", "near", "prompts"} {
		qs := queries[kind]
		x := random
		if kind == "prompts" {
			x = prompts
		}
		b.Run(kind+"/search+add", func(b *testing.B) {
			defer testenv.ReportCPU(b)()
			i := 0
			for b.Loop() {
				q := qs[i%len(qs)]
				x.Search("s", q, 4, time.Time{})
				x.Add("s", fmt.Sprint("q", id), q, time.Time{})
				x.Remove(fmt.Sprint("q", id)) // keep the scope at n
				i++
				id++
			}
		})
		// The miss as the router makes it: one prepared query for the
		// threshold search (the default 0.92) and the insert.
		b.Run(kind+"/query", func(b *testing.B) {
			defer testenv.ReportCPU(b)()
			i := 0
			for b.Loop() {
				q := NewVecQuery(qs[i%len(qs)])
				x.SearchQuery("s", q, 4, 0.92, time.Time{})
				x.AddQuery("s", fmt.Sprint("q", id), q, time.Time{})
				x.Remove(fmt.Sprint("q", id))
				i++
				id++
			}
		})
	}
}
