package cache

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// Get returns the entry stored under the exact key.
func (r *RedisStore) Get(ctx context.Context, key string) (*Entry, error) {
	ctx, cancel := r.callCtx(ctx)
	defer cancel()
	b, err := r.c.Get(ctx, r.exactKey(key)).Bytes()
	if errors.Is(err, redis.Nil) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("cache: redis get: %w", err)
	}
	e, err := decodePayload(b)
	if err != nil {
		return nil, fmt.Errorf("cache: redis get: %w", err)
	}
	return e, nil
}

// GetMany returns the entry under each key, nil where there is none, in
// one pipeline (a cluster's runs on each master the keys live on). A
// corrupt entry is a miss, as in Search.
func (r *RedisStore) GetMany(ctx context.Context, keys []string) ([]*Entry, error) {
	out := make([]*Entry, len(keys))
	if len(keys) == 0 {
		return out, nil
	}
	ctx, cancel := r.callCtx(ctx)
	defer cancel()
	pipe := r.c.Pipeline()
	cmds := make([]*redis.StringCmd, len(keys))
	for i, k := range keys {
		cmds[i] = pipe.Get(ctx, r.exactKey(k))
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("cache: redis get many: %w", err)
	}
	for i, c := range cmds {
		b, err := c.Bytes()
		if errors.Is(err, redis.Nil) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("cache: redis get many: %w", err)
		}
		if e, err := decodePayload(b); err == nil {
			out[i] = e
		}
	}
	return out, nil
}

// Search returns up to k live entries of scope, most similar first.
func (r *RedisStore) Search(ctx context.Context, scope string, vec []float32, k int) ([]Match, error) {
	return r.SearchQuery(ctx, scope, NewVecQuery(vec), k, -1)
}

// SearchQuery is Search for the entries of similarity at least minSim
// only: the local index skips candidates too far to reach it; RediSearch's
// KNN answer is filtered.
func (r *RedisStore) SearchQuery(ctx context.Context, scope string, q *VecQuery, k int, minSim float32) ([]Match, error) {
	vec := q.Vec()
	if k <= 0 {
		return nil, nil
	}
	if len(vec) != r.opt.Dims {
		return nil, fmt.Errorf("cache: redis search: vector has %d dims, want %d", len(vec), r.opt.Dims)
	}
	if r.mode == modeRedisearch {
		ms, err := r.searchKNN(ctx, scope, vec, k)
		return atLeast(ms, minSim), err
	}
	idx := r.idx.Load()
	hits := idx.SearchQuery(scope, q, k, minSim, time.Now())
	if len(hits) == 0 {
		return nil, nil
	}
	ctx, cancel := r.callCtx(ctx)
	defer cancel()
	pipe := r.c.Pipeline()
	cmds := make([]*redis.StringCmd, len(hits))
	for i, h := range hits {
		cmds[i] = pipe.HGet(ctx, r.vecKey(h.ID), "entry")
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("cache: redis search: %w", err)
	}
	out := make([]Match, 0, len(hits))
	for i, h := range hits {
		b, err := cmds[i].Bytes()
		if errors.Is(err, redis.Nil) {
			idx.Remove(h.ID) // expired or deleted behind our back
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("cache: redis search: %w", err)
		}
		e, err := decodePayload(b)
		if err != nil {
			continue // a corrupt entry is a miss
		}
		out = append(out, Match{Entry: e, Similarity: h.Similarity})
	}
	return out, nil
}

// GetByID returns the entry with this id: from its vector record, or for an
// exact-only entry through its id record and exact key.
func (r *RedisStore) GetByID(ctx context.Context, id string) (*Entry, error) {
	ctx, cancel := r.callCtx(ctx)
	defer cancel()
	b, err := r.c.HGet(ctx, r.vecKey(id), "entry").Bytes()
	if errors.Is(err, redis.Nil) {
		ref, rerr := r.c.Get(ctx, r.idKey(id)).Bytes()
		if errors.Is(rerr, redis.Nil) {
			return nil, ErrNotFound
		}
		if rerr != nil {
			return nil, fmt.Errorf("cache: redis get by id: %w", rerr)
		}
		_, key := decodeRef(ref)
		if key == "" {
			return nil, ErrNotFound
		}
		b, err = r.c.Get(ctx, r.exactKey(key)).Bytes()
		if errors.Is(err, redis.Nil) {
			return nil, ErrNotFound
		}
	}
	if err != nil {
		return nil, fmt.Errorf("cache: redis get by id: %w", err)
	}
	e, err := decodePayload(b)
	if err != nil {
		return nil, fmt.Errorf("cache: redis get by id: %w", err)
	}
	if e.ID != id {
		return nil, ErrNotFound // the exact key now holds a later entry
	}
	return e, nil
}

// Stats reports the content. Entries counts the live ids of every namespace
// (exact and semantic entries alike); Bytes is unknown (0).
func (r *RedisStore) Stats(ctx context.Context) (Stats, error) {
	st := Stats{VectorSearchBy: r.mode}
	ctx, cancel := r.writeCtx(ctx)
	defer cancel()
	names, err := r.w.SMembers(ctx, r.keyNamespaces).Result()
	if err != nil {
		return st, fmt.Errorf("cache: redis stats: %w", err)
	}
	if len(names) > 0 {
		now := strconv.FormatInt(time.Now().UnixMilli(), 10)
		pipe := r.w.Pipeline()
		counts := make([]*redis.IntCmd, len(names))
		for i, ns := range names {
			counts[i] = pipe.ZCount(ctx, r.nsKey(ns), "("+now, "+inf")
		}
		if _, err := pipe.Exec(ctx); err != nil {
			return st, fmt.Errorf("cache: redis stats: %w", err)
		}
		for _, c := range counts {
			st.Entries += c.Val()
		}
	}
	if r.mode == modeLocal {
		idx := r.idx.Load()
		st.VectorEntries, st.Scopes = int64(idx.Len()), int64(idx.Scopes())
		return st, nil
	}
	n, err := r.indexDocs(ctx)
	if err != nil {
		return st, fmt.Errorf("cache: redis stats: %w", err)
	}
	st.VectorEntries = n
	return st, nil
}
