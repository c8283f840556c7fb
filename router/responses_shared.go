package router

import (
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/redis/go-redis/v9"

	"frontdoor/internal/telemetry"
)

// sharedIDs shares the records of the responses nodes created among the
// replicas that share the cache's Redis: a GET, DELETE or follow-up that
// reaches another replica than the one that passed the response on still
// finds its node. Each record is one string key, <key_prefix>r:<id> =
// tenant NUL upstream NUL model NUL expiry (Unix seconds), expiring with
// responses.remember_for. It is written before the client has the id, and
// each call waits at most cache.reads.timeout.
// Records of responses the cache served stay with their replica (they
// hold the conversation a follow-up needs, and GET renders them from the
// shared cache entry only there). A Redis failure leaves each replica with
// its own memory: counted in
// frontdoor_responses_shared_errors_total{op} and logged, at most once a
// minute per operation.
type sharedIDs struct {
	redis   redis.UniversalClient
	prefix  string
	timeout time.Duration
	warn    *telemetry.RateLog
	errs    map[string]*metrics.Counter
}

func newSharedIDs(c redis.UniversalClient, prefix string, timeout time.Duration, warn *telemetry.RateLog, set *metrics.Set) *sharedIDs {
	s := &sharedIDs{redis: c, prefix: prefix, timeout: timeout, warn: warn, errs: map[string]*metrics.Counter{}}
	for _, op := range []string{"put", "get", "del"} {
		s.errs[op] = set.NewCounter(`frontdoor_responses_shared_errors_total{op="` + op + `"}`)
	}
	return s
}

func (s *sharedIDs) failed(op string, err error) {
	s.errs[op].Inc()
	s.warn.Warn("responses-shared:"+op, "responses: the shared id records in Redis failed; this replica knows only the ids it passed on",
		"op", op, "error", err.Error())
}

func (s *sharedIDs) put(rec *respRecord, ttl time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), s.timeout)
	defer cancel()
	v := rec.tenant + "\x00" + rec.upstream + "\x00" + rec.model + "\x00" + strconv.FormatInt(rec.expires.Unix(), 10)
	if err := s.redis.Set(ctx, s.prefix+rec.id, v, ttl).Err(); err != nil {
		s.failed("put", err)
	}
}

func (s *sharedIDs) get(id string) *respRecord {
	ctx, cancel := context.WithTimeout(context.Background(), s.timeout)
	defer cancel()
	v, err := s.redis.Get(ctx, s.prefix+id).Result()
	if err == redis.Nil {
		return nil
	}
	if err != nil {
		s.failed("get", err)
		return nil
	}
	parts := strings.SplitN(v, "\x00", 4)
	if len(parts) != 4 || parts[1] == "" {
		return nil
	}
	exp, err := strconv.ParseInt(parts[3], 10, 64)
	if err != nil {
		return nil
	}
	return &respRecord{id: id, tenant: parts[0], upstream: parts[1], model: parts[2], expires: time.Unix(exp, 0)}
}

func (s *sharedIDs) del(id string) {
	ctx, cancel := context.WithTimeout(context.Background(), s.timeout)
	defer cancel()
	if err := s.redis.Del(ctx, s.prefix+id).Err(); err != nil {
		s.failed("del", err)
	}
}
