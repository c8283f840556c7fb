package admission

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Limit names, as in Rejection.Limit and the rejected_total metric.
const (
	LimitTenantRPS         = "tenant_rps"
	LimitTenantConcurrency = "tenant_concurrency"
	LimitTenantTokens      = "tenant_tokens"
	LimitGlobalRPS         = "global_rps"
	LimitGlobalTokens      = "global_tokens"
)

// Backends.
const (
	BackendLocal = "local"
	BackendRedis = "redis"
)

const (
	defaultLeaseTTL   = 30 * time.Second
	defaultRedisRetry = time.Second
	// redisOpTimeout bounds one Redis call (pool wait included) on top of
	// the client's own read and write timeouts.
	redisOpTimeout = 500 * time.Millisecond
	// Polling a full concurrency cap held in Redis (other replicas' releases
	// are not signalled): from pollMin, doubling up to pollMax.
	pollMin = 10 * time.Millisecond
	pollMax = 100 * time.Millisecond
)

// Limits are one tenant's limits (router Tenant) or the global ones
// (admission.global, where MaxConcurrency is ignored). Zero means unlimited.
// Burst 0 with RPS > 0 means one second's worth, ceil(RPS) (at least 1).
type Limits struct {
	RPS             float64
	Burst           int
	TokensPerMinute int
	MaxConcurrency  int
}

func (l Limits) burst() float64 {
	if l.Burst > 0 {
		return float64(l.Burst)
	}
	return max(1, math.Ceil(l.RPS))
}

// divide returns the share of one of n replicas for the Redis-down
// fallback: rates divided, burst and budget divided rounding up (at least 1
// where limited). MaxConcurrency has no share: a concurrency cap is never
// enforced locally with Redis (see enterOnce).
func (l Limits) divide(n int) Limits {
	if n <= 1 {
		return l
	}
	ceilDiv := func(v int) int {
		if v <= 0 {
			return 0
		}
		return max(1, (v+n-1)/n)
	}
	d := Limits{RPS: l.RPS / float64(n), TokensPerMinute: ceilDiv(l.TokensPerMinute)}
	if l.RPS > 0 {
		d.Burst = max(1, int(math.Ceil(l.burst()/float64(n))))
	}
	return d
}

// Config configures an Admitter.
type Config struct {
	Backend string // "local" (default) or "redis"
	// Global limits apply to cache misses only; MaxConcurrency is ignored.
	Global  Limits
	MaxWait time.Duration // how long a request over a limit may wait for capacity
	// Replicas is the known replica count: with Redis down, each replica
	// enforces the rate and token quotas ÷ Replicas locally. Concurrency
	// caps are never enforced locally with the redis backend: a capped
	// tenant's requests are refused while Redis does not answer. < 1 means 1.
	Replicas int
	// KeyPrefix is redis.key_prefix (e.g. "fd:"); keys live under KeyPrefix+"a:".
	KeyPrefix string
	// DefaultMaxTokens is the completion allowance charged up front when a
	// request sets no max_tokens (see UpfrontTokens).
	DefaultMaxTokens int
	// LeaseTTL is how long a Redis concurrency slot outlives its replica;
	// live leases are renewed every LeaseTTL/3. Default 30s.
	LeaseTTL time.Duration
	// RedisRetry is how long decisions stay local after a Redis failure
	// before Redis is asked again. Default 1s.
	RedisRetry time.Duration
	// Clock replaces time.Now, for tests. With the redis backend it also
	// replaces the Redis server's clock in the scripts.
	Clock func() time.Time
	// Log gets the degraded states as WARN lines, at most one per kind
	// every 10s (Redis down, capped requests refused for it, leases
	// restored). nil: slog.Default().
	Log *slog.Logger
}

// Rejection says why a request may not go on. It is an error.
type Rejection struct {
	Limit      string        // LimitTenantRPS, ...
	RetryAfter time.Duration // when capacity is expected; see RetryAfterSeconds
	Message    string        // for the client; names the tenant, never a key
	// Oversize: the request's tokens alone exceed the budget, so it can
	// never be admitted and retrying will not help.
	Oversize bool
}

func (r *Rejection) Error() string { return r.Message }

// RetryAfterSeconds is RetryAfter in whole seconds, rounded up, at least 1:
// the Retry-After header value.
func (r *Rejection) RetryAfterSeconds() int {
	s := int((r.RetryAfter + time.Second - 1) / time.Second)
	return max(s, 1)
}

// Admitter enforces the limits. Safe for concurrent use.
type Admitter struct {
	cfg      Config
	epoch    time.Time // time base of the local buckets
	global   Limits
	gLimited bool // global rps or tokens limited

	tenants atomic.Pointer[map[string]*tenantState] // configured; replaced whole by SetTenants
	extra   sync.Map                                // unconfigured names -> *tenantState (no limits)

	local *localSet     // the local backend, or the Redis fallback (quota ÷ replicas)
	rs    *redisBackend // nil with the local backend

	// sleep waits for d or until ctx ends; replaced in tests.
	sleep func(ctx context.Context, d time.Duration) error

	m    metricsState
	warn *rateWarn

	stop      chan struct{}
	wg        sync.WaitGroup
	closeOnce sync.Once
}

// tenantState is one tenant as the hot path sees it.
type tenantState struct {
	name         string
	lim          Limits
	enterLimited bool // rps or max_concurrency
	missLimited  bool // tokens_per_minute
	inflight     atomic.Int64
	local        *localTenant // nil when unlimited
	// wake gets a token per released slot (capacity max_concurrency), so a
	// waiter for a slot wakes without polling; stale tokens only cause a
	// retry.
	wake chan struct{}
	// Redis keys and preformatted script arguments.
	rpsKey, concKey, tpmKey string
	rpsRate, rpsCap         string // per ms, capacity
	tpmRate, tpmCap         string
}

// New builds an Admitter. tenants maps configured tenant names to their
// limits; other names get no limits. client is required for the redis
// backend (the shared redisconn client) and ignored otherwise. Close stops
// the lease renewer.
func New(cfg Config, tenants map[string]Limits, client redis.UniversalClient) (*Admitter, error) {
	switch cfg.Backend {
	case "", BackendLocal:
		cfg.Backend = BackendLocal
	case BackendRedis:
		if client == nil {
			return nil, errors.New("admission: backend redis needs a redis client")
		}
	default:
		return nil, fmt.Errorf("admission: backend %q is not one of local, redis", cfg.Backend)
	}
	if cfg.Replicas < 1 {
		cfg.Replicas = 1
	}
	if cfg.LeaseTTL <= 0 {
		cfg.LeaseTTL = defaultLeaseTTL
	}
	if cfg.RedisRetry <= 0 {
		cfg.RedisRetry = defaultRedisRetry
	}
	if cfg.MaxWait < 0 {
		cfg.MaxWait = 0
	}
	if err := checkLimits("global", cfg.Global); err != nil {
		return nil, err
	}
	a := &Admitter{
		cfg:    cfg,
		epoch:  time.Now(),
		global: Limits{RPS: cfg.Global.RPS, Burst: cfg.Global.Burst, TokensPerMinute: cfg.Global.TokensPerMinute},
		stop:   make(chan struct{}),
		sleep:  sleepCtx,
		warn:   newRateWarn(cfg.Log, warnEvery),
	}
	if cfg.Clock != nil {
		a.epoch = cfg.Clock()
	}
	a.gLimited = a.global.RPS > 0 || a.global.TokensPerMinute > 0
	a.local = newLocalSet(a.global.divide(a.divisor()))
	empty := map[string]*tenantState{}
	a.tenants.Store(&empty)
	if err := a.SetTenants(tenants); err != nil {
		return nil, err
	}
	if cfg.Backend == BackendRedis {
		a.rs = newRedisBackend(client, cfg.KeyPrefix+"a:", cfg)
		a.rs.failed = a.redisFailed
		a.rs.restored = func(n int64) { a.m.leasesRestored(n, a.warn) }
		a.rs.loadScripts()
		a.wg.Add(1)
		go a.renewLoop()
	}
	return a, nil
}

func (a *Admitter) divisor() int {
	if a.cfg.Backend == BackendRedis {
		return a.cfg.Replicas
	}
	return 1
}

// SetTenants replaces the tenants' limits (a config reload). A tenant whose
// limits are unchanged keeps its state; a changed one starts afresh (full
// buckets), and the requests it has in flight finish on the old limits but
// keep counting against its concurrency cap, old or new, until they end
// (in-process slots are carried over; Redis leases are per tenant name).
// Requests admitted while a tenant had no cap do not count against a cap
// a reload adds. Nothing changes if a limit is invalid.
func (a *Admitter) SetTenants(tenants map[string]Limits) error {
	for name, lim := range tenants {
		if err := checkLimits("tenant "+strconv.Quote(name), lim); err != nil {
			return err
		}
	}
	old := *a.tenants.Load()
	next := make(map[string]*tenantState, len(tenants))
	prefix := a.cfg.KeyPrefix + "a:"
	for name, lim := range tenants {
		if ts, ok := old[name]; ok && ts.lim == lim {
			next[name] = ts
			continue
		}
		ts := newTenantState(name, lim, prefix)
		var held *slots
		if prev, ok := old[name]; ok {
			if prev.local != nil {
				held = prev.local.slots
			}
			if prev.wake != nil && ts.wake != nil {
				ts.wake = prev.wake // waiters on the old state are woken too
			}
		}
		if ts.enterLimited || ts.missLimited || held != nil {
			ts.local = newLocalTenant(lim.divide(a.divisor()), held)
		}
		next[name] = ts
	}
	a.tenants.Store(&next)
	counts := a.global.TokensPerMinute > 0
	for _, ts := range next {
		a.m.addTenant(ts)
		counts = counts || ts.lim.TokensPerMinute > 0
	}
	if counts {
		WarmTokenizer()
	}
	return nil
}

func checkLimits(what string, l Limits) error {
	if l.RPS < 0 || math.IsNaN(l.RPS) || math.IsInf(l.RPS, 0) || l.Burst < 0 || l.TokensPerMinute < 0 || l.MaxConcurrency < 0 {
		return fmt.Errorf("admission: %s: limits must be finite and >= 0", what)
	}
	return nil
}

func newTenantState(name string, lim Limits, prefix string) *tenantState {
	ts := &tenantState{
		name:         name,
		lim:          lim,
		enterLimited: lim.RPS > 0 || lim.MaxConcurrency > 0,
		missLimited:  lim.TokensPerMinute > 0,
	}
	if lim.MaxConcurrency > 0 {
		ts.wake = make(chan struct{}, lim.MaxConcurrency)
	}
	esc := escapeKey(name)
	ts.rpsKey = prefix + "{t:" + esc + "}:rps"
	ts.concKey = prefix + "{t:" + esc + "}:conc"
	ts.tpmKey = prefix + "{g}:tpm:" + esc
	if lim.RPS > 0 {
		ts.rpsRate, ts.rpsCap = fmtFloat(lim.RPS/1000), fmtFloat(lim.burst())
	}
	if lim.TokensPerMinute > 0 {
		ts.tpmRate, ts.tpmCap = fmtFloat(float64(lim.TokensPerMinute)/60000), strconv.Itoa(lim.TokensPerMinute)
	}
	return ts
}

// Close stops the background lease renewer. Passes and charges still
// outstanding may be released and settled afterwards. Idempotent.
func (a *Admitter) Close() error {
	a.closeOnce.Do(func() {
		close(a.stop)
		a.wg.Wait()
	})
	return nil
}

// tenant returns the state of name; unconfigured names get an unlimited
// state of their own, made once, so that their in-flight requests count.
// The router passes configured names or "default" only, so these stay few.
func (a *Admitter) tenant(name string) *tenantState {
	if ts, ok := (*a.tenants.Load())[name]; ok {
		return ts
	}
	if v, ok := a.extra.Load(name); ok {
		return v.(*tenantState)
	}
	v, loaded := a.extra.LoadOrStore(name, newTenantState(name, Limits{}, a.cfg.KeyPrefix+"a:"))
	ts := v.(*tenantState)
	if !loaded {
		a.m.addTenant(ts)
	}
	return ts
}

// now is the local buckets' time: nanoseconds since the epoch.
func (a *Admitter) now() int64 {
	if a.cfg.Clock != nil {
		return int64(a.cfg.Clock().Sub(a.epoch))
	}
	return int64(time.Since(a.epoch))
}

// useRedis reports whether this decision should go to Redis: always while
// Redis is up; while it is down, for one decision (the probe) every
// RedisRetry. The probe first adds back this replica's live leases (see
// redisBackend.renew), which Redis may have lost (a restart, a failover)
// or dropped (renewals failed for LeaseTTL), so that they count before
// anything more is admitted.
func (a *Admitter) useRedis() bool {
	if a.rs == nil {
		return false
	}
	if !a.rs.health.down.Load() {
		return true
	}
	if !a.rs.health.allow() {
		return false
	}
	if a.rs.renew() != nil { // reported by renew
		return false
	}
	return true
}

// Inflight is the number of the tenant's requests in flight in this
// process (passes not yet released).
func (a *Admitter) Inflight(tenant string) int64 {
	if ts, ok := (*a.tenants.Load())[tenant]; ok {
		return ts.inflight.Load()
	}
	if v, ok := a.extra.Load(tenant); ok {
		return v.(*tenantState).inflight.Load()
	}
	return 0
}

// Status is a snapshot for /status.
type Status struct {
	Backend string `json:"backend"`
	// Redis is "up", or "down": rates and tokens decided locally, capped
	// tenants refused. Redis backend only.
	Redis     string `json:"redis,omitempty"`
	Fallbacks uint64 `json:"fallback_decisions"`
	// CapRefusals counts requests refused because their tenant's
	// max_concurrency lives in Redis and Redis did not answer.
	CapRefusals uint64 `json:"cap_unavailable_refusals"`
	// LeasesRestored counts this replica's live leases that were missing
	// in Redis and were added back (Redis lost data, or renewals failed).
	LeasesRestored uint64           `json:"leases_restored"`
	Inflight       map[string]int64 `json:"inflight"`
	// ParseBudget is the byte budget of the request bodies parsed at
	// once (the gateway sets it; see ByteBudget).
	ParseBudget *ByteBudgetStatus `json:"parse_budget,omitempty"`
}

// Status returns the backend state and every tenant's in-flight count.
func (a *Admitter) Status() Status {
	s := Status{Backend: a.cfg.Backend, Fallbacks: a.m.fallbacks.Load(), CapRefusals: a.m.capRefusals.Load(),
		LeasesRestored: a.m.restored.Load(), Inflight: map[string]int64{}}
	if a.rs != nil {
		s.Redis = "up"
		if a.rs.health.down.Load() {
			s.Redis = "down"
		}
	}
	for name, ts := range *a.tenants.Load() {
		s.Inflight[name] = ts.inflight.Load()
	}
	a.extra.Range(func(k, v any) bool {
		s.Inflight[k.(string)] = v.(*tenantState).inflight.Load()
		return true
	})
	return s
}

func fmtFloat(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }

// escapeKey keeps [A-Za-z0-9_.-] of a tenant name and %-escapes the rest,
// so that braces cannot change a key's hash tag.
func escapeKey(name string) string {
	const hex = "0123456789ABCDEF"
	safe := func(c byte) bool {
		return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '.' || c == '-'
	}
	n := 0
	for i := 0; i < len(name); i++ {
		if !safe(name[i]) {
			n++
		}
	}
	if n == 0 {
		return name
	}
	b := make([]byte, 0, len(name)+2*n)
	for i := 0; i < len(name); i++ {
		c := name[i]
		if safe(c) {
			b = append(b, c)
		} else {
			b = append(b, '%', hex[c>>4], hex[c&15])
		}
	}
	return string(b)
}
