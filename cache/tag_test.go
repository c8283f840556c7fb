package cache

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

// checkPurgeTag puts tagged and untagged entries in two namespaces, exact and
// semantic, purges one tag and checks that exactly its entries are gone,
// from Get, Search and Stats alike.
func checkPurgeTag(t *testing.T, s Store, dims int) {
	t.Helper()
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(15, 15))
	unit := func() []float32 {
		v := make([]float32, dims)
		for i := range v {
			v[i] = float32(rng.NormFloat64())
		}
		return rdsNormalize(v)
	}
	q := unit()
	type put struct {
		e   *Entry
		vec bool
	}
	var puts []put
	add := func(ns, tag string, vec bool) {
		e := rdsEntry(ns, "s-"+ns, fmt.Sprint(ns, "/", tag, "/", len(puts)))
		e.Tag = tag
		var v []float32
		if vec {
			v = q
		}
		if err := s.Put(ctx, e, v, time.Minute); err != nil {
			t.Fatal(err)
		}
		puts = append(puts, put{e, vec})
	}
	for _, ns := range []string{"a", "b"} {
		add(ns, "faq-v1", false)
		add(ns, "faq-v1", true)
		add(ns, "faq-v2", true)
		add(ns, "", false)
		add(ns, "", true)
	}
	before, err := s.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	n, err := s.PurgeTag(ctx, "faq-v1")
	if err != nil || n != 4 {
		t.Fatalf("PurgeTag(faq-v1) = %d, %v; want 4", n, err)
	}
	for _, p := range puts {
		_, err := s.Get(ctx, p.e.ExactKey)
		gone := errors.Is(err, ErrNotFound)
		if err != nil && !gone {
			t.Fatal(err)
		}
		if want := p.e.Tag == "faq-v1"; gone != want {
			t.Fatalf("entry %q (tag %q): gone = %v, want %v", p.e.Content, p.e.Tag, gone, want)
		}
	}
	for _, ns := range []string{"a", "b"} {
		ms, err := s.Search(ctx, "s-"+ns, q, 10)
		if err != nil {
			t.Fatal(err)
		}
		if len(ms) != 2 {
			t.Fatalf("scope %s: %d vectors left, want 2 (faq-v2 and untagged)", ns, len(ms))
		}
		for _, m := range ms {
			if m.Entry.Tag == "faq-v1" {
				t.Fatalf("a purged vector is still found: %+v", m.Entry)
			}
		}
	}
	after, err := s.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if before.Entries-after.Entries != 4 {
		t.Fatalf("Stats.Entries %d -> %d; want 4 fewer", before.Entries, after.Entries)
	}
	if n, err := s.PurgeTag(ctx, "faq-v1"); n != 0 || err != nil {
		t.Fatalf("second PurgeTag = %d, %v; want 0", n, err)
	}
	if n, err := s.PurgeTag(ctx, ""); n != 0 || err != nil {
		t.Fatalf("PurgeTag(\"\") = %d, %v; want 0: untagged entries are not a tag", n, err)
	}
}

func TestMemoryPurgeTag(t *testing.T) {
	m := NewMemoryStore(1<<20, rdsDims)
	t.Cleanup(func() { _ = m.Close() })
	checkPurgeTag(t, m, rdsDims)
}

func TestRedisPurgeTag(t *testing.T) {
	forEachRedisMode(t, func(t *testing.T, m redisMode) {
		_, c := m.start(t)
		checkPurgeTag(t, newTestRedisStore(t, c, RedisOptions{VectorSearch: m.vs}), rdsDims)
	})
}
