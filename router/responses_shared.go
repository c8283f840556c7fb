package router

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/redis/go-redis/v9"

	"frontdoor/internal/telemetry"
)

// sharedIDs shares the records of the responses passed on among the
// replicas that share the cache's Redis: a GET, DELETE or follow-up that
// reaches another replica than the one that passed the response on still
// finds its node (or, for a response the cache served, its entry and the
// conversation a follow-up needs), and still knows its tenant. Each record
// is one string key, <key_prefix>r:<id>, a JSON object (sharedRecord)
// expiring with responses.remember_for; records written before the
// conversation was shared (tenant NUL upstream NUL model NUL expiry) are
// still read. It is written before the client has the id, and each call
// waits at most cache.reads.timeout. A Redis failure leaves each replica
// with its own memory: counted in
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
	return &sharedIDs{redis: c, prefix: prefix, timeout: timeout, warn: warn, errs: newSharedIDErrors(set)}
}

func (s *sharedIDs) failed(op string, err error) {
	s.errs[op].Inc()
	s.warn.Warn("responses-shared:"+op, "responses: the shared id records in Redis failed; this replica knows only the ids it passed on",
		"op", op, "error", err.Error())
}

// sharedRecord is a respRecord as Redis holds it.
type sharedRecord struct {
	Tenant   string          `json:"t"`
	Upstream string          `json:"u,omitempty"`
	Entry    string          `json:"e,omitempty"`
	Hit      bool            `json:"h,omitempty"`
	Model    string          `json:"m,omitempty"`
	Created  int64           `json:"c,omitempty"`
	Expires  int64           `json:"x"`
	Input    json.RawMessage `json:"i,omitempty"`
	Output   string          `json:"o,omitempty"`
}

func (s *sharedIDs) put(rec *respRecord, ttl time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), s.timeout)
	defer cancel()
	v, err := json.Marshal(sharedRecord{Tenant: rec.tenant, Upstream: rec.upstream, Entry: rec.entry, Hit: rec.hit, Model: rec.model,
		Created: rec.created, Expires: rec.expires.Unix(), Input: rec.input, Output: rec.output})
	if err == nil {
		err = s.redis.Set(ctx, s.prefix+rec.id, v, ttl).Err()
	}
	if err != nil {
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
	return decodeShared(id, v)
}

// decodeShared reads a shared record, nil when it is malformed or names
// neither a node nor a cache entry.
func decodeShared(id, v string) *respRecord {
	if strings.HasPrefix(v, "{") {
		var r sharedRecord
		if json.Unmarshal([]byte(v), &r) != nil || (r.Upstream == "") == (r.Entry == "") {
			return nil
		}
		rec := &respRecord{id: id, tenant: r.Tenant, upstream: r.Upstream, entry: r.Entry, hit: r.Hit, model: r.Model, created: r.Created,
			expires: time.Unix(r.Expires, 0), output: r.Output}
		if len(r.Input) > 0 {
			rec.input = r.Input
		}
		return rec
	}
	parts := strings.SplitN(v, "\x00", 4) // the first format: a node's record
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
