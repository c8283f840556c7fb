package cache

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// syncLoop applies the events stream to the local index from lastID on,
// sweeps expired vectors, and after an outage resumes where it stopped, or
// reloads everything when events were lost (stream trimmed or Redis restarted
// empty).
func (r *RedisStore) syncLoop(ctx context.Context, lastID string) {
	defer close(r.done)
	var backoff time.Duration
	failing := false
	lastSweep := time.Now()
	for ctx.Err() == nil {
		if now := time.Now(); now.Sub(lastSweep) >= r.opt.sweepEvery {
			r.idx.Load().Sweep(now)
			lastSweep = now
		}
		var err error
		if failing {
			lastID, err = r.recoverSync(ctx, lastID)
		} else {
			lastID, err = r.syncOnce(ctx, lastID)
		}
		if err == nil {
			if failing {
				r.syncFailing.Store(false)
			}
			failing, backoff = false, 0
			continue
		}
		if ctx.Err() != nil {
			return
		}
		r.syncFailed(err)
		failing = true
		backoff = min(max(2*backoff, 50*time.Millisecond), 2*time.Second)
		t := time.NewTimer(backoff/2 + rand.N(backoff/2+1))
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// syncOnce waits up to SyncInterval for events after lastID, applies them and
// returns the id to read from next.
func (r *RedisStore) syncOnce(ctx context.Context, lastID string) (string, error) {
	rctx, cancel := context.WithTimeout(ctx, r.opt.SyncInterval+r.opt.WriteTimeout)
	streams, err := r.w.XRead(rctx, &redis.XReadArgs{
		Streams: []string{r.keyEvents, lastID}, Count: syncCount, Block: r.opt.SyncInterval,
	}).Result()
	cancel()
	if errors.Is(err, redis.Nil) {
		return lastID, nil
	}
	if err != nil {
		return lastID, fmt.Errorf("cache: redis: index sync: %w", err)
	}
	for _, s := range streams {
		if len(s.Messages) == 0 {
			continue
		}
		if err := r.applyEvents(ctx, s.Messages); err != nil {
			return lastID, fmt.Errorf("cache: redis: index sync: %w", err) // read the batch again
		}
		lastID = s.Messages[len(s.Messages)-1].ID
	}
	return lastID, nil
}

// applyEvents fetches the vectors of added ids in one pipeline and applies
// the events in order.
func (r *RedisStore) applyEvents(ctx context.Context, msgs []redis.XMessage) error {
	idx := r.idx.Load()
	var adds []string
	skip := make([]bool, len(msgs))
	for i, m := range msgs {
		if op, _ := m.Values["op"].(string); op == "add" {
			id, _ := m.Values["id"].(string)
			// Our own Put, already in this index (not in one a resync replaced).
			if at, ok := r.own.LoadAndDelete(id); ok && at == idx {
				skip[i] = true
			} else if id != "" {
				adds = append(adds, id)
			}
		}
	}
	got, err := r.fetchVectors(ctx, adds)
	if err != nil {
		return err
	}
	for i, m := range msgs {
		op, _ := m.Values["op"].(string)
		id, _ := m.Values["id"].(string)
		switch op {
		case "add":
			if skip[i] {
				continue
			}
			if v, ok := got[id]; ok {
				idx.Add(v.scope, id, v.vec, v.expires)
			} else {
				idx.Remove(id)
			}
		case "del":
			idx.Remove(id)
		}
	}
	return nil
}

// recoverSync runs once Redis answers again after errors: it resumes from
// lastID when the stream still holds everything after it, else reloads.
func (r *RedisStore) recoverSync(ctx context.Context, lastID string) (string, error) {
	cctx, cancel := r.writeCtx(ctx)
	info, err := r.w.XInfoStream(cctx, r.keyEvents).Result()
	cancel()
	gap := false
	switch {
	case err == nil:
		gap = info.Length > 0 && compareStreamIDs(info.FirstEntry.ID, lastID) > 0
	case isNoSuchKey(err):
		gap = true // Redis restarted empty, or the stream was deleted
	default:
		return lastID, fmt.Errorf("cache: redis: index sync: %w", err)
	}
	if !gap {
		return lastID, nil
	}
	r.syncResyncs.Add(1)
	return r.resync(ctx)
}

// resync loads every vector into a fresh index and swaps it in. It returns
// the stream id to read events from, captured before the scan so that no
// change is missed (events replayed twice are harmless).
func (r *RedisStore) resync(ctx context.Context) (string, error) {
	cctx, cancel := r.writeCtx(ctx)
	last, err := r.w.XRevRangeN(cctx, r.keyEvents, "+", "-", 1).Result()
	cancel()
	if err != nil {
		return "", fmt.Errorf("cache: redis: index reload: %w", err)
	}
	lastID := "0-0"
	if len(last) > 0 {
		lastID = last[0].ID
	}
	fresh := NewVectorIndexWith(r.opt.Dims, r.opt.LocalIndex)
	prefix := r.vecKey("")
	err = r.scanKeys(ctx, escapeGlob(prefix)+"*", func(ctx context.Context, keys []string) error {
		ids := make([]string, len(keys))
		for i, k := range keys {
			ids[i] = strings.TrimPrefix(k, prefix)
		}
		got, err := r.fetchVectors(ctx, ids)
		if err != nil {
			return err
		}
		for id, v := range got {
			fresh.Add(v.scope, id, v.vec, v.expires)
		}
		return nil
	})
	if err != nil {
		return "", fmt.Errorf("cache: redis: index reload: %w", err)
	}
	r.idx.Store(fresh)
	r.own.Clear() // marks of the old index would never match again
	return lastID, nil
}

// scanKeys calls fn with batches of the keys matching pattern, on every
// master of a cluster.
func (r *RedisStore) scanKeys(ctx context.Context, pattern string, fn func(context.Context, []string) error) error {
	scan := func(ctx context.Context, c redis.Cmdable) error {
		var cursor uint64
		for {
			cctx, cancel := r.writeCtx(ctx)
			keys, next, err := c.Scan(cctx, cursor, pattern, scanCount).Result()
			cancel()
			if err != nil {
				return err
			}
			if len(keys) > 0 {
				if err := fn(ctx, keys); err != nil {
					return err
				}
			}
			if cursor = next; cursor == 0 {
				return nil
			}
		}
	}
	if cc, ok := r.w.(*redis.ClusterClient); ok {
		return cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error { return scan(ctx, c) })
	}
	return scan(ctx, r.w)
}

type storedVec struct {
	scope   string
	vec     []float32
	expires time.Time
}

// fetchVectors reads the vector, scope and remaining TTL of ids in one
// pipeline. Ids whose hash is gone or malformed are left out.
func (r *RedisStore) fetchVectors(ctx context.Context, ids []string) (map[string]storedVec, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	ctx, cancel := r.writeCtx(ctx)
	defer cancel()
	pipe := r.w.Pipeline()
	fields := make([]*redis.SliceCmd, len(ids))
	ttls := make([]*redis.DurationCmd, len(ids))
	for i, id := range ids {
		k := r.vecKey(id)
		fields[i] = pipe.HMGet(ctx, k, "vec", "scope")
		ttls[i] = pipe.PTTL(ctx, k)
	}
	if _, err := pipe.Exec(ctx); err != nil && !isServerError(err) {
		return nil, err
	}
	now := time.Now()
	out := make(map[string]storedVec, len(ids))
	for i, id := range ids {
		if fields[i].Err() != nil || ttls[i].Err() != nil {
			continue // e.g. WRONGTYPE: not ours
		}
		vals := fields[i].Val()
		if len(vals) != 2 {
			continue
		}
		raw, _ := vals[0].(string)
		scope, _ := vals[1].(string)
		vec, ok := bytesVec([]byte(raw), r.opt.Dims)
		if !ok {
			continue // gone, or written with other dims
		}
		var expires time.Time
		switch ttl := ttls[i].Val(); {
		case ttl == -2: // expired between the two commands
			continue
		case ttl > 0:
			expires = now.Add(ttl)
		}
		out[id] = storedVec{scope: scope, vec: vec, expires: expires}
	}
	return out, nil
}

// isServerError reports an error reply of the server, as opposed to a
// connection problem.
func isServerError(err error) bool {
	var re redis.Error
	return errors.As(err, &re)
}

func isNoSuchKey(err error) bool {
	return isServerError(err) && strings.Contains(strings.ToLower(err.Error()), "no such key")
}

// escapeGlob escapes the characters SCAN MATCH treats specially.
func escapeGlob(s string) string {
	var b strings.Builder
	for _, c := range s {
		if strings.ContainsRune(`*?[]\`, c) {
			b.WriteByte('\\')
		}
		b.WriteRune(c)
	}
	return b.String()
}

// compareStreamIDs orders two stream ids "ms-seq".
func compareStreamIDs(a, b string) int {
	am, as := parseStreamID(a)
	bm, bs := parseStreamID(b)
	switch {
	case am != bm:
		if am < bm {
			return -1
		}
		return 1
	case as != bs:
		if as < bs {
			return -1
		}
		return 1
	}
	return 0
}

func parseStreamID(id string) (ms, seq uint64) {
	m, s, _ := strings.Cut(id, "-")
	ms, _ = strconv.ParseUint(m, 10, 64)
	seq, _ = strconv.ParseUint(s, 10, 64)
	return ms, seq
}
