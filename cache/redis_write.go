package cache

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Put stores e under e.ExactKey (when set) and, with vec, in e.Scope for
// semantic search, all in one pipeline. An empty e.ID is set to
// NewEntryID(). ttl must be > 0: nothing in Redis lives forever. A later Put
// under the same exact key replaces the exact entry; the earlier one's vector
// stays searchable until its own TTL.
func (r *RedisStore) Put(ctx context.Context, e *Entry, vec []float32, ttl time.Duration) error {
	return r.PutBatch(ctx, []Write{{Entry: e, Vec: vec, TTL: ttl}})
}

// PutBatch stores ws in one pipeline, as Put stores one. An invalid write
// fails alone; the others are stored.
func (r *RedisStore) PutBatch(ctx context.Context, ws []Write) error {
	ctx, cancel := r.writeCtx(ctx)
	defer cancel()
	var errs []error
	pipe := r.w.Pipeline()
	// A cluster pipeline runs on the masters concurrently: the "add" events
	// go after the vectors they announce, in a second round trip.
	events := pipe
	if _, ok := r.w.(*redis.ClusterClient); ok {
		events = r.w.Pipeline()
	}
	type added struct {
		w       Write
		idx     *VectorIndex
		expires time.Time
	}
	var adds []added
	for _, w := range ws {
		idx, expires, err := r.queuePut(ctx, pipe, events, w)
		if err != nil {
			errs = append(errs, fmt.Errorf("cache: redis put: %w", err))
			continue
		}
		if idx != nil {
			adds = append(adds, added{w, idx, expires})
		}
	}
	if pipe.Len() == 0 {
		return errors.Join(errs...)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		for _, a := range adds {
			r.own.CompareAndDelete(a.w.Entry.ID, a.idx)
		}
		return errors.Join(append(errs, fmt.Errorf("cache: redis put: %w", err))...)
	}
	if events != pipe && events.Len() > 0 {
		if _, err := events.Exec(ctx); err != nil {
			errs = append(errs, fmt.Errorf("cache: redis put: events: %w", err))
		}
	}
	for _, a := range adds {
		a.idx.Add(a.w.Entry.Scope, a.w.Entry.ID, a.w.Vec, a.expires)
	}
	return errors.Join(errs...)
}

// queuePut checks w and adds its commands to pipe. In local mode it returns
// the index to add the vector to once the pipeline has run.
func (r *RedisStore) queuePut(ctx context.Context, pipe, events redis.Pipeliner, w Write) (*VectorIndex, time.Time, error) {
	e, vec, ttl := w.Entry, w.Vec, w.TTL
	switch {
	case e == nil:
		return nil, time.Time{}, errors.New("nil entry")
	case ttl <= 0:
		return nil, time.Time{}, errors.New("ttl must be > 0")
	case vec != nil && len(vec) != r.opt.Dims:
		return nil, time.Time{}, fmt.Errorf("vector has %d dims, want %d", len(vec), r.opt.Dims)
	case vec == nil && e.ExactKey == "":
		return nil, time.Time{}, errors.New("entry has neither an exact key nor a vector")
	case vec != nil && (e.Scope == "" || strings.ContainsRune(e.Scope, ',')):
		// ',' would split the RediSearch TAG into several scopes.
		return nil, time.Time{}, errors.New("a vector needs a scope without ','")
	}
	if e.ID == "" {
		e.ID = NewEntryID()
	}
	ttl = max(ttl, time.Millisecond)
	payload, err := encodePayload(e)
	if err != nil {
		return nil, time.Time{}, err
	}
	now := time.Now()
	expires := now.Add(ttl)
	nk := r.nsKey(e.Namespace)
	if e.ExactKey != "" {
		pipe.Set(ctx, r.exactKey(e.ExactKey), payload, ttl)
	}
	pipe.Set(ctx, r.idKey(e.ID), encodeRef(e.Namespace, e.ExactKey), ttl)
	if vec != nil {
		vk := r.vecKey(e.ID)
		pipe.HSet(ctx, vk, "vec", vecBytes(vec), "entry", payload, "scope", e.Scope, "ns", e.Namespace)
		pipe.PExpire(ctx, vk, ttl)
	}
	sets := []string{nk}
	if e.Tag != "" {
		sets = append(sets, r.tagKey(e.Tag))
	}
	for _, k := range sets {
		pipe.ZAdd(ctx, k, redis.Z{Score: float64(expires.UnixMilli()), Member: e.ID})
		pipe.ZRemRangeByScore(ctx, k, "-inf", "("+strconv.FormatInt(now.Add(-nsTrimSlack).UnixMilli(), 10))
		// The set lives as long as its longest-lived id: NX sets a first
		// expiry, GT only ever extends it (Redis >= 7).
		pipe.ExpireNX(ctx, k, ttl+nsTrimSlack)
		pipe.ExpireGT(ctx, k, ttl+nsTrimSlack)
	}
	pipe.SAdd(ctx, r.keyNamespaces, e.Namespace)
	if vec == nil {
		return nil, expires, nil
	}
	// Also in redisearch mode, so that a replica forced to local mode on
	// the same server stays in sync.
	events.XAdd(ctx, r.eventArgs("add", e.ID))
	if r.mode != modeLocal {
		return nil, expires, nil
	}
	// Marked before Exec: the event may come back before Exec returns.
	idx := r.idx.Load()
	r.own.Store(e.ID, idx)
	return idx, expires, nil
}

func (r *RedisStore) eventArgs(op, id string) *redis.XAddArgs {
	return &redis.XAddArgs{Stream: r.keyEvents, MaxLen: eventsMaxLen, Approx: true, Values: []any{"op", op, "id", id}}
}

// Delete removes an entry by id: its exact key, its vector and its id record.
// When the exact key was overwritten by a later entry, that one goes too: a
// cache miss, never a wrong answer.
func (r *RedisStore) Delete(ctx context.Context, id string) error {
	ctx, cancel := r.writeCtx(ctx)
	defer cancel()
	ref, err := r.w.Get(ctx, r.idKey(id)).Bytes()
	if err != nil && !errors.Is(err, redis.Nil) {
		return fmt.Errorf("cache: redis delete: %w", err)
	}
	found := err == nil
	ns, key := decodeRef(ref)
	pipe := r.w.Pipeline()
	var dels []*redis.IntCmd
	if key != "" {
		dels = append(dels, pipe.Del(ctx, r.exactKey(key)))
	}
	dels = append(dels, pipe.Del(ctx, r.idKey(id)), pipe.Del(ctx, r.vecKey(id)))
	if found {
		pipe.ZRem(ctx, r.nsKey(ns), id)
	}
	pipe.XAdd(ctx, r.eventArgs("del", id))
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("cache: redis delete: %w", err)
	}
	if r.mode == modeLocal {
		r.idx.Load().Remove(id)
	}
	var n int64
	for _, d := range dels {
		n += d.Val()
	}
	if n == 0 {
		return ErrNotFound
	}
	return nil
}

// Purge removes every entry of namespace, walking its id set in batches,
// and returns how many live entries it removed.
func (r *RedisStore) Purge(ctx context.Context, namespace string) (int, error) {
	n, err := r.purgeSet(ctx, r.nsKey(namespace))
	if err != nil {
		return n, fmt.Errorf("cache: redis purge: %w", err)
	}
	return n, nil
}

// PurgeTag removes every entry tagged tag, walking the tag's id set in
// batches, and returns how many live entries it removed.
func (r *RedisStore) PurgeTag(ctx context.Context, tag string) (int, error) {
	if tag == "" {
		return 0, nil
	}
	n, err := r.purgeSet(ctx, r.tagKey(tag))
	if err != nil {
		return n, fmt.Errorf("cache: redis purge tag: %w", err)
	}
	return n, nil
}

func (r *RedisStore) purgeSet(ctx context.Context, set string) (int, error) {
	total := 0
	for {
		n, more, err := r.purgeBatch(ctx, set)
		total += n
		if err != nil || !more {
			return total, err
		}
	}
}

// purgeBatch removes the first purgeBatch ids of the id set nk (a
// namespace's or a tag's) and their entries; an id leaves its namespace's
// set too.
func (r *RedisStore) purgeBatch(ctx context.Context, nk string) (n int, more bool, err error) {
	ctx, cancel := r.writeCtx(ctx)
	defer cancel()
	ids, err := r.w.ZRange(ctx, nk, 0, purgeBatch-1).Result()
	if err != nil || len(ids) == 0 {
		return 0, false, err
	}
	pipe := r.w.Pipeline()
	refs := make([]*redis.StringCmd, len(ids))
	for i, id := range ids {
		refs[i] = pipe.Get(ctx, r.idKey(id))
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return 0, false, err
	}
	pipe = r.w.Pipeline()
	vdels := make([]*redis.IntCmd, len(ids))
	members := make([]any, len(ids))
	for i, id := range ids {
		if ref, err := refs[i].Bytes(); err == nil {
			ns, key := decodeRef(ref)
			if key != "" {
				pipe.Del(ctx, r.exactKey(key))
			}
			if k := r.nsKey(ns); k != nk {
				pipe.ZRem(ctx, k, id)
			}
		}
		pipe.Del(ctx, r.idKey(id))
		vdels[i] = pipe.Del(ctx, r.vecKey(id))
		pipe.XAdd(ctx, r.eventArgs("del", id))
		members[i] = id
	}
	pipe.ZRem(ctx, nk, members...)
	if _, err := pipe.Exec(ctx); err != nil {
		return 0, false, err
	}
	idx := r.idx.Load()
	for i, id := range ids {
		if refs[i].Err() == nil || vdels[i].Val() > 0 {
			n++
		}
		if idx != nil {
			idx.Remove(id)
		}
	}
	return n, len(ids) == purgeBatch, nil
}
