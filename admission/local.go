package admission

import (
	"sync"
	"time"
)

// localTenant is one tenant's limits enforced in process.
type localTenant struct {
	mu      sync.Mutex
	rps     *bucket // nil: unlimited
	tpm     *bucket // nil: unlimited
	maxConc int     // 0: unlimited
	conc    int
}

func newLocalTenant(l Limits) *localTenant {
	lt := &localTenant{maxConc: l.MaxConcurrency}
	if l.RPS > 0 {
		lt.rps = newBucket(l.RPS, l.burst())
	}
	if l.TokensPerMinute > 0 {
		lt.tpm = newBucket(float64(l.TokensPerMinute)/60, float64(l.TokensPerMinute))
	}
	return lt
}

// enter takes a concurrency slot and one request from the rate bucket, or
// neither. A full cap is reported first, without touching the bucket.
func (lt *localTenant) enter(now int64, maxWait time.Duration) verdict {
	lt.mu.Lock()
	defer lt.mu.Unlock()
	if lt.maxConc > 0 && lt.conc >= lt.maxConc {
		return verdict{full: true, limit: LimitTenantConcurrency}
	}
	var v verdict
	if lt.rps != nil {
		lt.rps.refill(now)
		w := lt.rps.shortfall(1)
		if w > maxWait {
			return verdict{limit: LimitTenantRPS, wait: w}
		}
		lt.rps.level--
		v.wait, v.limit = w, LimitTenantRPS
		q := quotaOf(lt.rps.level, lt.rps.cap, lt.rps.rate*1e9)
		v.quota = &q
	}
	if lt.maxConc > 0 {
		lt.conc++
	}
	v.ok = true
	return v
}

func (lt *localTenant) releaseSlot() {
	lt.mu.Lock()
	lt.conc--
	lt.mu.Unlock()
}

func (lt *localTenant) refundRPS(now int64) {
	lt.mu.Lock()
	lt.rps.refill(now)
	lt.rps.add(1)
	lt.mu.Unlock()
}

func (lt *localTenant) adjustTokens(now int64, delta float64) {
	if lt.tpm == nil {
		return
	}
	lt.mu.Lock()
	lt.tpm.refill(now)
	lt.tpm.add(delta)
	lt.mu.Unlock()
}

// localSet holds the global buckets enforced in process.
type localSet struct {
	mu  sync.Mutex
	rps *bucket // nil: unlimited
	tpm *bucket // nil: unlimited
}

func newLocalSet(global Limits) *localSet {
	s := &localSet{}
	if global.RPS > 0 {
		s.rps = newBucket(global.RPS, global.burst())
	}
	if global.TokensPerMinute > 0 {
		s.tpm = newBucket(float64(global.TokensPerMinute)/60, float64(global.TokensPerMinute))
	}
	return s
}

// charge is one bucket a decision takes from.
type charge struct {
	b     *bucket
	cost  float64
	limit string
}

// reserve takes cost from every bucket if all of them can give it within
// maxWait, else from none. The verdict's wait is the longest shortfall.
func reserve(now int64, maxWait time.Duration, cs []charge) verdict {
	var v verdict
	for _, c := range cs {
		c.b.refill(now)
		if w := c.b.shortfall(c.cost); w > v.wait {
			v.wait, v.limit = w, c.limit
		}
	}
	if v.wait > maxWait {
		return v
	}
	for _, c := range cs {
		c.b.level -= c.cost
	}
	v.ok = true
	return v
}

// miss takes tokens from the tenant's token bucket (lt may be nil) and one
// request and tokens from the global buckets, all or nothing. Lock order:
// tenant, then global.
func (s *localSet) miss(lt *localTenant, now int64, tokens float64, maxWait time.Duration) verdict {
	var buf [3]charge
	cs := buf[:0]
	if lt != nil && lt.tpm != nil {
		lt.mu.Lock()
		defer lt.mu.Unlock()
		cs = append(cs, charge{lt.tpm, tokens, LimitTenantTokens})
	}
	if s.rps != nil || s.tpm != nil {
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.rps != nil {
			cs = append(cs, charge{s.rps, 1, LimitGlobalRPS})
		}
		if s.tpm != nil {
			cs = append(cs, charge{s.tpm, tokens, LimitGlobalTokens})
		}
	}
	v := reserve(now, maxWait, cs)
	if v.ok && lt != nil && lt.tpm != nil {
		q := quotaOf(lt.tpm.level, lt.tpm.cap, lt.tpm.rate*1e9)
		v.quota = &q
	}
	return v
}

// adjustTokens settles the global token bucket by delta.
func (s *localSet) adjustTokens(now int64, delta float64) {
	if s.tpm == nil {
		return
	}
	s.mu.Lock()
	s.tpm.refill(now)
	s.tpm.add(delta)
	s.mu.Unlock()
}

// refund gives back one request and tokens to the global buckets.
func (s *localSet) refund(now int64, tokens float64) {
	s.mu.Lock()
	if s.rps != nil {
		s.rps.refill(now)
		s.rps.add(1)
	}
	if s.tpm != nil {
		s.tpm.refill(now)
		s.tpm.add(tokens)
	}
	s.mu.Unlock()
}
