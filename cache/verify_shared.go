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

// SharedEvidence keeps a verifier's evidence, its thresholds and the
// entries judged wrong in Redis, beside the cache's entries, so that the
// replicas of one cache learn together: a verdict any replica gets moves
// the threshold every replica serves with, and an entry judged wrong on
// one is refused on all (within a sync interval).
//
// Keys, under <key_prefix>v:
//
//	ev:<tenant>\x00<model>   list of "similarity,0|1", newest first, at most maxEvidence
//	thr:<tenant>\x00<model>  the threshold the evidence has moved to
//	scopes                   set of the scopes above
//	wrong                    hash: entry id -> highest similarity judged wrong
type SharedEvidence struct {
	Redis   redis.UniversalClient
	Prefix  string        // <key_prefix>v:
	Timeout time.Duration // per call
	TTL     time.Duration // of the wrong hash after its last write: an entry lives no longer (cache.ttl)
}

// ErrTooManyWrong: the shared entries judged wrong are not read (the
// thresholds are).
var ErrTooManyWrong = errors.New("shared wrong entries not read")

// MaxWrongEntries bounds the entries judged wrong a verifier remembers.
const MaxWrongEntries = 100_000

func scopeName(tenant, model string) string { return tenant + "\x00" + model }

// Record adds a verdict on entry (for tenant and model, at similarity sim)
// to the scope's shared evidence and returns what the replicas know of the
// scope.
func (s *SharedEvidence) Record(ctx context.Context, tenant, model, entry string, sim float32, wrong bool) (*Shared, error) {
	ctx, cancel := context.WithTimeout(ctx, s.Timeout)
	defer cancel()
	scope := scopeName(tenant, model)
	flag := "0"
	if wrong {
		flag = "1"
	}
	evKey := s.Prefix + "ev:" + scope
	pipe := s.Redis.TxPipeline()
	pipe.LPush(ctx, evKey, strconv.FormatFloat(float64(sim), 'f', 5, 32)+","+flag)
	pipe.LTrim(ctx, evKey, 0, maxEvidence-1)
	samples := pipe.LRange(ctx, evKey, 0, -1)
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, fmt.Errorf("shared evidence: %w", err)
	}
	extra := s.Redis.Pipeline()
	extra.SAdd(ctx, s.Prefix+"scopes", scope)
	if wrong {
		extra.HSet(ctx, s.Prefix+"wrong", entry, strconv.FormatFloat(float64(sim), 'f', 5, 32))
		extra.Expire(ctx, s.Prefix+"wrong", s.TTL)
	}
	got := extra.Get(ctx, s.Prefix+"thr:"+scope)
	if _, err := extra.Exec(ctx); err != nil && err != redis.Nil {
		return nil, fmt.Errorf("shared evidence: %w", err)
	}
	sh := &Shared{}
	for _, v := range samples.Val() {
		sim, flag, _ := strings.Cut(v, ",")
		if f, err := strconv.ParseFloat(sim, 32); err == nil {
			sh.Evidence.Add(float32(f), flag == "1")
		}
	}
	if f, err := got.Float64(); err == nil {
		sh.Threshold, sh.HasThreshold = f, true
	}
	return sh, nil
}

// SetThreshold stores the scope's threshold.
func (s *SharedEvidence) SetThreshold(ctx context.Context, tenant, model string, thr float64) error {
	ctx, cancel := context.WithTimeout(ctx, s.Timeout)
	defer cancel()
	return s.Redis.Set(ctx, s.Prefix+"thr:"+scopeName(tenant, model), strconv.FormatFloat(thr, 'f', 4, 64), 0).Err()
}

// Load reads every scope's threshold and the entries judged wrong (at
// most MaxWrongEntries of them).
func (s *SharedEvidence) Load(ctx context.Context) (map[[2]string]float64, map[string]float32, error) {
	ctx, cancel := context.WithTimeout(ctx, s.Timeout)
	defer cancel()
	scopes, err := s.Redis.SMembers(ctx, s.Prefix+"scopes").Result()
	if err != nil {
		return nil, nil, fmt.Errorf("shared thresholds: %w", err)
	}
	pipe := s.Redis.Pipeline()
	gets := make([]*redis.StringCmd, len(scopes))
	for i, sc := range scopes {
		gets[i] = pipe.Get(ctx, s.Prefix+"thr:"+sc)
	}
	n := pipe.HLen(ctx, s.Prefix+"wrong")
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
	if n.Val() > MaxWrongEntries {
		return thr, nil, fmt.Errorf("%w: %d entries judged wrong, more than %d", ErrTooManyWrong, n.Val(), MaxWrongEntries)
	}
	if n.Val() > 0 {
		all, err := s.Redis.HGetAll(ctx, s.Prefix+"wrong").Result()
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
