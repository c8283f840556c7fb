package cache

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
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
