package admission

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// warnEvery is how often one kind of degraded-state line may be written.
const warnEvery = 10 * time.Second

// rateWarn writes at most one WARN line per key every interval and says
// how many it held back (the admission twin of telemetry.RateLog, which
// this package does not import).
type rateWarn struct {
	l     *slog.Logger
	every time.Duration
	mu    sync.Mutex
	last  map[string]time.Time
	held  map[string]int
}

func newRateWarn(l *slog.Logger, every time.Duration) *rateWarn {
	return &rateWarn{l: l, every: every, last: map[string]time.Time{}, held: map[string]int{}}
}

func (w *rateWarn) warn(level slog.Level, key, msg string, args ...any) {
	now := time.Now()
	w.mu.Lock()
	if last, ok := w.last[key]; ok && now.Sub(last) < w.every {
		w.held[key]++
		w.mu.Unlock()
		return
	}
	held := w.held[key]
	w.last[key], w.held[key] = now, 0
	w.mu.Unlock()
	if held > 0 {
		args = append(args, "held_back", held)
	}
	l := w.l
	if l == nil {
		l = slog.Default()
	}
	l.Log(context.Background(), level, msg, args...)
}

// redisFailed records a failed Redis call: decisions go to the fallback
// (rates and tokens) or are refused (concurrency caps) for RedisRetry.
func (a *Admitter) redisFailed(err error) {
	a.rs.health.fail()
	a.warn.warn(slog.LevelWarn, "redis-down", "admission: Redis failed; rate and token limits are decided locally at quota ÷ replicas and tenants with max_concurrency are refused until it answers",
		"replicas", a.cfg.Replicas, "retry", a.cfg.RedisRetry.String(), "error", err.Error())
}

// redisOK records a decision Redis answered.
func (a *Admitter) redisOK() {
	if a.rs.health.ok() {
		a.warn.warn(slog.LevelInfo, "redis-up", "admission: Redis answers again; decisions are shared")
	}
}

// fellBack counts a decision made locally because Redis failed.
func (a *Admitter) fellBack() {
	a.m.fallbacks.Add(1)
	if c := a.m.fallback.Load(); c != nil {
		c.Inc()
	}
}

// capUnavailable counts a request refused because its tenant's
// concurrency cap lives in Redis and Redis did not answer.
func (a *Admitter) capUnavailable(ts *tenantState) {
	a.m.capRefusals.Add(1)
	if c := a.m.capRefused.Load(); c != nil {
		c.Inc()
	}
	a.warn.warn(slog.LevelWarn, "cap-unavailable", "admission: request refused: its tenant's max_concurrency is shared in Redis, which does not answer; a local share could exceed the cap",
		"tenant", ts.name, "max_concurrency", ts.lim.MaxConcurrency)
}

// leasesRestored counts live leases that renewal found missing in Redis
// and added back.
func (m *metricsState) leasesRestored(n int64, w *rateWarn) {
	if n <= 0 {
		return
	}
	m.restored.Add(uint64(n))
	if c := m.restoredC.Load(); c != nil {
		c.Add(int(n))
	}
	w.warn(slog.LevelWarn, "leases-restored", "admission: concurrency leases held by this replica were missing in Redis and were added back: Redis lost data (a restart or a failover) or renewals failed for lease_ttl; until then other replicas could admit past the cap",
		"leases", n)
}
