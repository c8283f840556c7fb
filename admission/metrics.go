package admission

import (
	"strings"
	"sync"
	"sync/atomic"

	"github.com/VictoriaMetrics/metrics"
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

// RegisterMetrics exposes, in set:
//
//	frontdoor_admission_rejected_total{tenant,limit}  requests refused
//	frontdoor_admission_wait_seconds                  time spent in Enter and AdmitMiss (limited tenants and misses; histogram)
//	frontdoor_tenant_inflight{tenant}                 this replica's requests in flight
//	frontdoor_admission_fallback_total                decisions made locally because Redis failed
//	frontdoor_admission_redis_up                      1 while decisions go to Redis (redis backend only)
//	frontdoor_admission_cap_unavailable_total         capped requests refused because Redis did not answer
//	frontdoor_admission_leases_restored_total         live leases found missing in Redis and added back
func (a *Admitter) RegisterMetrics(set *metrics.Set) {
	a.m.set.Store(set)
	a.m.wait.Store(set.GetOrCreatePrometheusHistogram(`frontdoor_admission_wait_seconds`))
	fb := set.GetOrCreateCounter(`frontdoor_admission_fallback_total`)
	fb.Set(a.m.fallbacks.Load())
	a.m.fallback.Store(fb)
	if a.rs != nil {
		cr := set.GetOrCreateCounter(`frontdoor_admission_cap_unavailable_total`)
		cr.Set(a.m.capRefusals.Load())
		a.m.capRefused.Store(cr)
		lr := set.GetOrCreateCounter(`frontdoor_admission_leases_restored_total`)
		lr.Set(a.m.restored.Load())
		a.m.restoredC.Store(lr)
		h := &a.rs.health
		set.GetOrCreateGauge(`frontdoor_admission_redis_up`, func() float64 {
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
	set.GetOrCreateGauge(`frontdoor_tenant_inflight{tenant="`+labelValue(ts.name)+`"}`,
		func() float64 { return float64(p.Load().inflight.Load()) })
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
	c := set.GetOrCreateCounter(`frontdoor_admission_rejected_total{tenant="` + labelValue(tenant) + `",limit="` + limit + `"}`)
	m.rejects.Store(k, c)
	c.Inc()
}

// observeWait records the time from start to now (admitter clock, ns).
func (m *metricsState) observeWait(start, now int64) {
	if h := m.wait.Load(); h != nil {
		h.Update(float64(max(now-start, 0)) / 1e9)
	}
}

var labelEscaper = strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`)

func labelValue(s string) string { return labelEscaper.Replace(s) }
