package admission

import (
	"sync"
	"sync/atomic"

	"github.com/VictoriaMetrics/metrics"

	"frontdoor/internal/telemetry"
)

// The families admission exposes (see RegisterMetrics).
var (
	rejectedFamily = telemetry.NewFamily("frontdoor_admission_rejected_total",
		"Requests refused by admission, by tenant and limit.")
	waitFamily = telemetry.NewFamily("frontdoor_admission_wait_seconds",
		"Time spent waiting in admission.")
	fallbackFamily = telemetry.NewFamily("frontdoor_admission_fallback_total",
		"Admission decisions made locally because Redis failed.")
	redisUpFamily = telemetry.NewFamily("frontdoor_admission_redis_up",
		"1 while admission decisions go to Redis.")
	capUnavailableFamily = telemetry.NewFamily("frontdoor_admission_cap_unavailable_total",
		"Requests of tenants with max_concurrency refused because Redis, which holds the cap, did not answer.")
	leasesRestoredFamily = telemetry.NewFamily("frontdoor_admission_leases_restored_total",
		"Live concurrency leases found missing in Redis and added back (Redis lost data or renewals failed).")
	tenantInflightFamily = telemetry.NewFamily("frontdoor_tenant_inflight",
		"Requests in flight on this replica, by tenant.")
)

// metricsState holds the metrics once RegisterMetrics has been called; the
// hot path checks one atomic pointer and does nothing before that.
type metricsState struct {
	set       atomic.Pointer[metrics.Set]
	wait      atomic.Pointer[metrics.PrometheusHistogram]
	fallback  atomic.Pointer[metrics.Counter]
	fallbacks atomic.Uint64 // always counted, for Status
	// capRefused: capped requests refused because Redis did not answer.
	capRefused  atomic.Pointer[metrics.Counter]
	capRefusals atomic.Uint64
	// restoredC: live leases found missing in Redis and added back.
	restoredC atomic.Pointer[metrics.Counter]
	restored  atomic.Uint64
	rejects   sync.Map // limit + "\x00" + tenant -> *metrics.Counter
	inflight  sync.Map // tenant -> *atomic.Pointer[tenantState], what its gauge reads
}

// RegisterMetrics exposes the families above in set: redis_up,
// cap_unavailable and leases_restored with the redis backend only; the
// wait histogram times Enter and AdmitMiss (limited tenants and misses).
func (a *Admitter) RegisterMetrics(set *metrics.Set) {
	a.m.set.Store(set)
	a.m.wait.Store(waitFamily.GetOrCreateHistogram(set, nil))
	fb := fallbackFamily.GetOrCreateCounter(set)
	fb.Set(a.m.fallbacks.Load())
	a.m.fallback.Store(fb)
	if a.rs != nil {
		cr := capUnavailableFamily.GetOrCreateCounter(set)
		cr.Set(a.m.capRefusals.Load())
		a.m.capRefused.Store(cr)
		lr := leasesRestoredFamily.GetOrCreateCounter(set)
		lr.Set(a.m.restored.Load())
		a.m.restoredC.Store(lr)
		h := &a.rs.health
		redisUpFamily.GetOrCreateGauge(set, func() float64 {
			if h.down.Load() {
				return 0
			}
			return 1
		})
	}
	for _, ts := range *a.tenants.Load() {
		a.m.addTenant(ts)
	}
	a.extra.Range(func(_, v any) bool {
		a.m.addTenant(v.(*tenantState))
		return true
	})
}

// addTenant exposes the tenant's in-flight gauge. A tenant replaced by
// SetTenants keeps its series, which follows the current state.
func (m *metricsState) addTenant(ts *tenantState) {
	set := m.set.Load()
	if set == nil {
		return
	}
	cur, _ := m.inflight.LoadOrStore(ts.name, &atomic.Pointer[tenantState]{})
	p := cur.(*atomic.Pointer[tenantState])
	p.Store(ts)
	tenantInflightFamily.GetOrCreateGauge(set, func() float64 { return float64(p.Load().inflight.Load()) }, "tenant", ts.name)
}

func (m *metricsState) rejected(tenant, limit string) {
	set := m.set.Load()
	if set == nil {
		return
	}
	k := limit + "\x00" + tenant
	if c, ok := m.rejects.Load(k); ok {
		c.(*metrics.Counter).Inc()
		return
	}
	c := rejectedFamily.GetOrCreateCounter(set, "tenant", tenant, "limit", limit)
	m.rejects.Store(k, c)
	c.Inc()
}

// observeWait records the time from start to now (admitter clock, ns).
func (m *metricsState) observeWait(start, now int64) {
	if h := m.wait.Load(); h != nil {
		h.Update(float64(max(now-start, 0)) / 1e9)
	}
}
