package cache

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

// storeOnly hides every method of a Store but the Store interface's, as a
// store without SearchQuery would have.
type storeOnly struct{ Store }

// TestSearchQueryStores: the threshold search gives the same matches
// whether the store has SearchQuery (the memory store, here in a list
// scope) or not (Search and a filter): those of Search at or above minSim.
func TestSearchQueryStores(t *testing.T) {
	const dims, n = 64, 3000
	ctx := context.Background()
	m := NewMemoryStoreWith(0, dims, smallLists)
	t.Cleanup(func() { _ = m.Close() })
	rng := rand.New(rand.NewPCG(61, 62))
	vecs := make([][]float32, n)
	for i := range n {
		vecs[i] = memUnit(rng, dims)
		if err := m.Put(ctx, memEntry("ns", fmt.Sprint("k", i), "s"), vecs[i], time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 200 {
		v := viNear(rng, vecs[rng.IntN(n)], 0.85+0.15*rng.Float32())
		all, err := m.Search(ctx, "s", v, 4)
		if err != nil {
			t.Fatal(err)
		}
		for _, minSim := range []float32{-1, 0.9, 0.95} {
			want := atLeast(append([]Match(nil), all...), minSim)
			for name, s := range map[string]Store{"memory": m, "store only": storeOnly{m}} {
				got, err := searchQuery(ctx, s, "s", NewVecQuery(v), 4, minSim)
				if err != nil {
					t.Fatal(err)
				}
				if len(got) != len(want) {
					t.Fatalf("%s, query %d, minSim %.2f: %d matches; want %d", name, i, minSim, len(got), len(want))
				}
				for j := range want {
					if got[j].Entry != want[j].Entry || got[j].Similarity != want[j].Similarity {
						t.Fatalf("%s, query %d, minSim %.2f: match %d = %+v; want %+v", name, i, minSim, j, got[j], want[j])
					}
				}
			}
		}
	}
}

// TestMemoryPutBatchQuery: a write's prepared query is used only for the
// write's own vector; one prepared for another vector is ignored.
func TestMemoryPutBatchQuery(t *testing.T) {
	const dims = 64
	ctx := context.Background()
	m := NewMemoryStoreWith(0, dims, smallLists)
	t.Cleanup(func() { _ = m.Close() })
	rng := rand.New(rand.NewPCG(63, 64))
	for i := range 1000 { // past exact_max: lists
		if err := m.Put(ctx, memEntry("ns", fmt.Sprint("k", i), "s"), memUnit(rng, dims), time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	own, other := memUnit(rng, dims), memUnit(rng, dims)
	searched := NewVecQuery(own)
	if _, err := m.SearchQuery(ctx, "s", searched, 4, 0.9); err != nil {
		t.Fatal(err)
	}
	a, b := memEntry("ns", "a", "s"), memEntry("ns", "b", "s")
	err := m.PutBatch(ctx, []Write{
		{Entry: a, Vec: own, Query: searched, TTL: time.Hour},
		{Entry: b, Vec: other, Query: NewVecQuery(own), TTL: time.Hour}, // not b's vector
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		vec []float32
		id  string
	}{{own, a.ID}, {other, b.ID}} {
		ms, err := m.Search(ctx, "s", c.vec, 1)
		if err != nil || len(ms) != 1 || ms[0].Entry.ID != c.id || ms[0].Similarity < 0.99 {
			t.Fatalf("search for %s's vector: %+v, %v", c.id, ms, err)
		}
	}
}
