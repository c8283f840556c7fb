package admission

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Bucket hashes hold v (level) and t (time of v, ms). A missing bucket is
// full. Times are the server's (TIME) unless ARGV[1] > 0 gives one (tests).

// admitScript is every decision: the buckets and the lease, all or nothing.
//
//	KEYS[1..nb]  buckets; KEYS[nb+1] lease ZSET (optional)
//	ARGV         now_ms, max_wait_ms, nb, nb x (rate per ms, capacity, cost),
//	             [max leases, lease id, lease ttl ms]
//	returns      {0, i, ms, left}: admitted; reserved capacity is due in ms (bucket i
//	             the latest); left is bucket 1's level after the charge, floored
//	             {1, i, ms}: refused by bucket i, which has room in ms
//	             {2, 0, 0}:  the lease set is full (checked first, buckets untouched)
var admitScript = redis.NewScript(`
local now = tonumber(ARGV[1])
if now <= 0 then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + tonumber(t[2]) / 1000
end
local maxwait = tonumber(ARGV[2])
local nb = tonumber(ARGV[3])
local lk = KEYS[nb + 1]
local la = 4 + 3 * nb
if lk then
  redis.call('ZREMRANGEBYSCORE', lk, '-inf', now)
  if redis.call('ZCARD', lk) >= tonumber(ARGV[la]) then
    return {2, 0, 0}
  end
end
local lv, lt = {}, {}
local worst, wi = 0, 0
for i = 1, nb do
  local a = 1 + 3 * i
  local rate, cap, cost = tonumber(ARGV[a]), tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2])
  local h = redis.call('HMGET', KEYS[i], 'v', 't')
  local v, t = tonumber(h[1]), tonumber(h[2])
  if not v or not t then v, t = cap, now end
  if now > t then
    v = math.min(cap, v + (now - t) * rate)
    t = now
  end
  lv[i], lt[i] = v, t
  if v < cost then
    local w = (cost - v) / rate
    if w > worst then worst, wi = w, i end
  end
end
if worst > maxwait then
  return {1, wi, math.ceil(worst)}
end
for i = 1, nb do
  local a = 1 + 3 * i
  local rate, cap = tonumber(ARGV[a]), tonumber(ARGV[a + 1])
  local v = lv[i] - tonumber(ARGV[a + 2])
  redis.call('HSET', KEYS[i], 'v', v, 't', lt[i])
  redis.call('PEXPIRE', KEYS[i], math.ceil((cap - v) / rate) + 1000)
end
if lk then
  local ttl = tonumber(ARGV[la + 2])
  redis.call('ZADD', lk, now + ttl, ARGV[la + 1])
  redis.call('PEXPIRE', lk, 2 * ttl)
end
local left = 0
if nb >= 1 then left = math.floor(lv[1] - tonumber(ARGV[6])) end
return {0, wi, math.ceil(worst), left}
`)

// adjustScript adds delta tokens to buckets (a refund, or a charge when
// negative), keeping each within [-capacity, capacity].
//
//	KEYS  buckets
//	ARGV  now_ms, then per bucket: rate per ms, capacity, delta
var adjustScript = redis.NewScript(`
local now = tonumber(ARGV[1])
if now <= 0 then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + tonumber(t[2]) / 1000
end
for i = 1, #KEYS do
  local a = 3 * i - 1
  local rate, cap, delta = tonumber(ARGV[a]), tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2])
  local h = redis.call('HMGET', KEYS[i], 'v', 't')
  local v, t = tonumber(h[1]), tonumber(h[2])
  if not v or not t then v, t = cap, now end
  if now > t then
    v = math.min(cap, v + (now - t) * rate)
    t = now
  end
  v = math.min(cap, math.max(-cap, v + delta))
  if v >= cap then
    redis.call('DEL', KEYS[i])
  else
    redis.call('HSET', KEYS[i], 'v', v, 't', t)
    redis.call('PEXPIRE', KEYS[i], math.ceil((cap - v) / rate) + 1000)
  end
end
return 0
`)

// renewScript extends the leases of requests still in flight, adding back
// any that Redis no longer has (it lost them in a restart or a failover, or
// dropped them as expired while renewals failed): a held slot must count.
// It drops expired leases and returns the ids it added back.
//
//	KEYS[1]  lease ZSET
//	ARGV     now_ms, ttl ms, lease ids...
var renewScript = redis.NewScript(`
local now = tonumber(ARGV[1])
if now <= 0 then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + tonumber(t[2]) / 1000
end
local ttl = tonumber(ARGV[2])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
local added = {}
for i = 3, #ARGV do
  if redis.call('ZADD', KEYS[1], now + ttl, ARGV[i]) == 1 then
    added[#added + 1] = ARGV[i]
  end
end
if redis.call('ZCARD', KEYS[1]) > 0 then
  redis.call('PEXPIRE', KEYS[1], 2 * ttl)
end
return added
`)

// redisBackend keeps the buckets and leases in Redis.
type redisBackend struct {
	c       redis.UniversalClient
	clock   func() time.Time // Config.Clock; nil: the server's clock
	ttlMS   string
	replica string // lease id prefix, unique per Admitter
	seq     atomic.Uint64
	leases  sync.Map // live lease id -> *tenantState, for renewal
	// orphans are leases whose admission call failed: the script may have
	// run and added one nobody holds. renew removes them.
	orphans sync.Map // lease id -> *tenantState
	health  health
	// failed and restored report to the Admitter (WARN, metrics).
	failed   func(error)
	restored func(n int64)

	gRPSKey, gRPSRate, gRPSCap string
	gTPMKey, gTPMRate, gTPMCap string
}

func newRedisBackend(c redis.UniversalClient, prefix string, cfg Config) *redisBackend {
	var id [6]byte
	_, _ = rand.Read(id[:])
	r := &redisBackend{
		c:        c,
		clock:    cfg.Clock,
		ttlMS:    strconv.FormatInt(cfg.LeaseTTL.Milliseconds(), 10),
		replica:  hex.EncodeToString(id[:]),
		gRPSKey:  prefix + "{g}:rps",
		gTPMKey:  prefix + "{g}:tpm",
		health:   health{epoch: time.Now(), retry: cfg.RedisRetry},
		failed:   func(error) {},
		restored: func(int64) {},
	}
	if g := cfg.Global; g.RPS > 0 {
		r.gRPSRate, r.gRPSCap = fmtFloat(g.RPS/1000), fmtFloat(g.burst())
	}
	if g := cfg.Global; g.TokensPerMinute > 0 {
		r.gTPMRate, r.gTPMCap = fmtFloat(float64(g.TokensPerMinute)/60000), strconv.Itoa(g.TokensPerMinute)
	}
	return r
}

// loadScripts caches the scripts on the server, so that the first decision
// is one EVALSHA. A failure sends decisions to the fallback for a while.
func (r *redisBackend) loadScripts() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*redisOpTimeout)
	defer cancel()
	for _, s := range []*redis.Script{admitScript, adjustScript, renewScript} {
		if err := s.Load(ctx, r.c).Err(); err != nil {
			r.failed(fmt.Errorf("admission: loading scripts: %w", err))
			return
		}
	}
}

func (r *redisBackend) now() string {
	if r.clock == nil {
		return "0"
	}
	return fmtFloat(float64(r.clock().UnixMicro()) / 1000)
}

func msArg(d time.Duration) string { return fmtFloat(float64(d) / 1e6) }

// run runs a decision script and decodes its {code, index, ms[, left]} answer.
func (r *redisBackend) run(keys []string, args []any) ([]int64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), redisOpTimeout)
	defer cancel()
	res, err := admitScript.Run(ctx, r.c, keys, args...).Int64Slice()
	if err != nil {
		return nil, fmt.Errorf("admission script: %w", err)
	}
	if len(res) != 3 && len(res) != 4 {
		return nil, fmt.Errorf("admission script: unexpected answer %v", res)
	}
	return res, nil
}

func decode(res []int64, limits []string) verdict {
	v := verdict{redis: true, wait: time.Duration(res[2]) * time.Millisecond}
	if i := res[1]; i >= 1 && int(i) <= len(limits) {
		v.limit = limits[i-1]
	}
	switch res[0] {
	case 0:
		v.ok = true
	case 2:
		v.full, v.limit, v.wait = true, LimitTenantConcurrency, 0
	}
	return v
}

// enter is Enter's decision in Redis: the tenant's request bucket and a
// concurrency lease. It returns the lease id when it took one.
func (r *redisBackend) enter(ts *tenantState, maxWait time.Duration) (verdict, string, error) {
	var kb [2]string
	var ab [9]any
	keys, args := kb[:0], ab[:0]
	args = append(args, r.now(), msArg(maxWait), 0)
	if ts.lim.RPS > 0 {
		keys = append(keys, ts.rpsKey)
		args = append(args, ts.rpsRate, ts.rpsCap, 1)
	}
	args[2] = len(keys)
	var lease string
	if ts.lim.MaxConcurrency > 0 {
		lease = r.replica + ":" + strconv.FormatUint(r.seq.Add(1), 36)
		keys = append(keys, ts.concKey)
		args = append(args, ts.lim.MaxConcurrency, lease, r.ttlMS)
	}
	res, err := r.run(keys, args)
	if err != nil {
		if lease != "" {
			r.orphans.Store(lease, ts)
		}
		return verdict{}, "", err
	}
	v := decode(res, []string{LimitTenantRPS})
	if !v.ok {
		return v, "", nil
	}
	if ts.lim.RPS > 0 && len(res) > 3 {
		q := quotaOf(float64(res[3]), ts.lim.burst(), ts.lim.RPS)
		v.quota = &q
	}
	if lease != "" {
		r.leases.Store(lease, ts)
	}
	return v, lease, nil
}

// miss is AdmitMiss's decision in Redis: tenant tokens, global request
// rate and global tokens, all in the {g} slot.
func (r *redisBackend) miss(a *Admitter, ts *tenantState, tokens int, maxWait time.Duration) (verdict, error) {
	var kb [3]string
	var ab [12]any
	var lb [3]string
	keys, args, limits := kb[:0], ab[:0], lb[:0]
	args = append(args, r.now(), msArg(maxWait), 0)
	if ts.missLimited {
		keys, limits = append(keys, ts.tpmKey), append(limits, LimitTenantTokens)
		args = append(args, ts.tpmRate, ts.tpmCap, tokens)
	}
	if a.global.RPS > 0 {
		keys, limits = append(keys, r.gRPSKey), append(limits, LimitGlobalRPS)
		args = append(args, r.gRPSRate, r.gRPSCap, 1)
	}
	if a.global.TokensPerMinute > 0 {
		keys, limits = append(keys, r.gTPMKey), append(limits, LimitGlobalTokens)
		args = append(args, r.gTPMRate, r.gTPMCap, tokens)
	}
	args[2] = len(keys)
	res, err := r.run(keys, args)
	if err != nil {
		return verdict{}, err
	}
	v := decode(res, limits)
	if v.ok && ts.missLimited && len(res) > 3 {
		tpm := float64(ts.lim.TokensPerMinute)
		q := quotaOf(float64(res[3]), tpm, tpm/60)
		v.quota = &q
	}
	return v, nil
}

// adjustment is one bucket to settle or refund.
type adjustment struct {
	key, rate, cap string
	delta          float64
}

// adjust adds each adjustment's delta to its bucket, in one call. A failure
// loses the adjustment (the up-front charge stands) and counts as an outage.
func (r *redisBackend) adjust(adj []adjustment) error {
	if len(adj) == 0 {
		return nil
	}
	keys := make([]string, len(adj))
	args := make([]any, 0, 1+3*len(adj))
	args = append(args, r.now())
	for i, x := range adj {
		keys[i] = x.key
		args = append(args, x.rate, x.cap, fmtFloat(x.delta))
	}
	ctx, cancel := context.WithTimeout(context.Background(), redisOpTimeout)
	defer cancel()
	if err := adjustScript.Run(ctx, r.c, keys, args...).Err(); err != nil {
		err = fmt.Errorf("admission adjust: %w", err)
		r.failed(err)
		return err
	}
	return nil
}

// release removes a lease. On failure the lease becomes an orphan, which
// the next renewal removes: it would otherwise hold a slot of the cap
// until its TTL.
func (r *redisBackend) release(ts *tenantState, lease string) {
	r.leases.Delete(lease)
	ctx, cancel := context.WithTimeout(context.Background(), redisOpTimeout)
	defer cancel()
	if err := r.c.ZRem(ctx, ts.concKey, lease).Err(); err != nil {
		r.orphans.Store(lease, ts)
		r.failed(fmt.Errorf("admission lease release: %w", err))
	}
}

// renew extends every live lease of this Admitter, adding back the ones
// Redis lost, one call per tenant, and removes the orphans. A lease
// released while its renewal was on the way may have been added back:
// it is removed again afterwards.
func (r *redisBackend) renew() error {
	byTenant := map[*tenantState][]any{}
	r.leases.Range(func(k, v any) bool {
		ts := v.(*tenantState)
		byTenant[ts] = append(byTenant[ts], k)
		return true
	})
	ctx, cancel := context.WithTimeout(context.Background(), 2*redisOpTimeout)
	defer cancel()
	var first error
	fail := func(err error) {
		if first == nil {
			first = err
			r.failed(err)
		}
	}
	for ts, ids := range byTenant {
		args := append([]any{r.now(), r.ttlMS}, ids...)
		added, err := renewScript.Run(ctx, r.c, []string{ts.concKey}, args...).StringSlice()
		// A lease released since the snapshot may have been added back by
		// the script, even when its answer was lost: remove it now, or at
		// the next renewal as an orphan.
		var gone []any
		for _, id := range ids {
			if _, live := r.leases.Load(id); !live {
				gone = append(gone, id)
			}
		}
		if err != nil {
			fail(fmt.Errorf("admission lease renewal: %w", err))
			for _, id := range gone {
				r.orphans.Store(id, ts)
			}
			continue
		}
		if len(gone) > 0 {
			if err := r.c.ZRem(ctx, ts.concKey, gone...).Err(); err != nil {
				fail(fmt.Errorf("admission lease renewal: removing released leases: %w", err))
				for _, id := range gone {
					r.orphans.Store(id, ts)
				}
			}
		}
		var restored int64
		for _, id := range added {
			if _, live := r.leases.Load(id); live {
				restored++
			}
		}
		r.restored(restored)
	}
	r.orphans.Range(func(k, v any) bool {
		if err := r.c.ZRem(ctx, v.(*tenantState).concKey, k).Err(); err != nil {
			fail(fmt.Errorf("admission: removing an orphaned lease: %w", err))
			return false
		}
		r.orphans.Delete(k)
		return true
	})
	return first
}

// renewLoop renews the live leases every LeaseTTL/3 until Close.
func (a *Admitter) renewLoop() {
	defer a.wg.Done()
	t := time.NewTicker(a.cfg.LeaseTTL / 3)
	defer t.Stop()
	for {
		select {
		case <-a.stop:
			return
		case <-t.C:
			_ = a.rs.renew() // a lease that cannot be renewed expires; nothing else to do
		}
	}
}

// health sends decisions to the local fallback for RedisRetry after a
// Redis failure; then one decision at a time probes Redis again. It runs on
// real time, whatever Config.Clock says.
type health struct {
	epoch   time.Time
	retry   time.Duration
	down    atomic.Bool
	retryAt atomic.Int64 // ns since epoch
}

func (h *health) now() int64 { return int64(time.Since(h.epoch)) }

// allow reports whether a decision may go to Redis: always while up; while
// down, one caller (the probe) per retry period.
func (h *health) allow() bool {
	if !h.down.Load() {
		return true
	}
	at, now := h.retryAt.Load(), h.now()
	return now >= at && h.retryAt.CompareAndSwap(at, now+int64(redisOpTimeout))
}

func (h *health) fail() {
	h.retryAt.Store(h.now() + int64(h.retry))
	h.down.Store(true)
}

// ok records an answer; it reports whether Redis was down until now.
func (h *health) ok() bool {
	return h.down.Load() && h.down.CompareAndSwap(true, false)
}
