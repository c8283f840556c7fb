package router

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"frontdoor/cache"
)

// sharedEvidence keeps the verifier's evidence, its thresholds and the
// entries judged wrong in Redis, beside the cache's entries, so that the
// replicas of one cache learn together: a verdict any replica gets moves
// the threshold every replica serves with, and an entry judged wrong on
// one is refused on all (within a sync interval).
//
// Keys, under <key_prefix>v:
//
//	ev:<tenant>\x00<model>   list of "similarity,0|1", newest first, at most maxSharedEvidence
//	thr:<tenant>\x00<model>  the threshold the evidence has moved to
//	scopes                   set of the scopes above
//	wrong                    hash: entry id -> highest similarity judged wrong
type sharedEvidence struct {
	rdb     redis.UniversalClient
	prefix  string
	timeout time.Duration
	ttl     time.Duration // of the wrong hash after its last write: an entry lives no longer (cache.ttl)
}

// errTooManyWrong: the shared entries judged wrong are not read (the
// thresholds are).
var errTooManyWrong = errors.New("shared wrong entries not read")

// maxSharedEvidence is the evidence a scope keeps in Redis: as in memory.
const maxSharedEvidence = 4096

// verifySyncEvery is how often a replica reads the shared thresholds and
// entries judged wrong.
const verifySyncEvery = time.Second

func scopeName(tenant, model string) string { return tenant + "\x00" + model }

// record adds a verdict to the scope's shared evidence and returns that
// evidence and the scope's shared threshold (ok false: none yet).
func (s *sharedEvidence) record(ctx context.Context, a audit, wrong bool) (ev cache.Evidence, thr float64, ok bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	scope := scopeName(a.tenant, a.model)
	flag := "0"
	if wrong {
		flag = "1"
	}
	evKey := s.prefix + "ev:" + scope
	pipe := s.rdb.TxPipeline()
	pipe.LPush(ctx, evKey, strconv.FormatFloat(float64(a.similarity), 'f', 5, 32)+","+flag)
	pipe.LTrim(ctx, evKey, 0, maxSharedEvidence-1)
	samples := pipe.LRange(ctx, evKey, 0, -1)
	if _, err := pipe.Exec(ctx); err != nil {
		return ev, 0, false, fmt.Errorf("shared evidence: %w", err)
	}
	extra := s.rdb.Pipeline()
	extra.SAdd(ctx, s.prefix+"scopes", scope)
	if wrong {
		extra.HSet(ctx, s.prefix+"wrong", a.entry, strconv.FormatFloat(float64(a.similarity), 'f', 5, 32))
		extra.Expire(ctx, s.prefix+"wrong", s.ttl)
	}
	got := extra.Get(ctx, s.prefix+"thr:"+scope)
	if _, err := extra.Exec(ctx); err != nil && err != redis.Nil {
		return ev, 0, false, fmt.Errorf("shared evidence: %w", err)
	}
	for _, v := range samples.Val() {
		sim, flag, _ := strings.Cut(v, ",")
		if f, err := strconv.ParseFloat(sim, 32); err == nil {
			ev.Add(float32(f), flag == "1")
		}
	}
	if f, err := got.Float64(); err == nil {
		thr, ok = f, true
	}
	return ev, thr, ok, nil
}

// setThreshold stores the scope's threshold.
func (s *sharedEvidence) setThreshold(ctx context.Context, tenant, model string, thr float64) error {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	return s.rdb.Set(ctx, s.prefix+"thr:"+scopeName(tenant, model), strconv.FormatFloat(thr, 'f', 4, 64), 0).Err()
}

// load reads every scope's threshold and the entries judged wrong (at
// most maxWrongEntries of them).
func (s *sharedEvidence) load(ctx context.Context) (map[[2]string]float64, map[string]float32, error) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	scopes, err := s.rdb.SMembers(ctx, s.prefix+"scopes").Result()
	if err != nil {
		return nil, nil, fmt.Errorf("shared thresholds: %w", err)
	}
	pipe := s.rdb.Pipeline()
	gets := make([]*redis.StringCmd, len(scopes))
	for i, sc := range scopes {
		gets[i] = pipe.Get(ctx, s.prefix+"thr:"+sc)
	}
	n := pipe.HLen(ctx, s.prefix+"wrong")
	if _, err := pipe.Exec(ctx); err != nil && err != redis.Nil {
		return nil, nil, fmt.Errorf("shared thresholds: %w", err)
	}
	thr := map[[2]string]float64{}
	for i, sc := range scopes {
		tenant, model, _ := strings.Cut(sc, "\x00")
		if f, err := gets[i].Float64(); err == nil {
			thr[[2]string{tenant, model}] = f
		}
	}
	wrong := map[string]float32{}
	if n.Val() > maxWrongEntries {
		return thr, nil, fmt.Errorf("%w: %d entries judged wrong, more than %d", errTooManyWrong, n.Val(), maxWrongEntries)
	}
	if n.Val() > 0 {
		all, err := s.rdb.HGetAll(ctx, s.prefix+"wrong").Result()
		if err != nil {
			return nil, nil, fmt.Errorf("shared wrong entries: %w", err)
		}
		for id, v := range all {
			if f, err := strconv.ParseFloat(v, 32); err == nil {
				wrong[id] = float32(f)
			}
		}
	}
	return thr, wrong, nil
}
