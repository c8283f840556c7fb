package admission

import (
	"math"
	"time"
)

// Quota is a tenant's bucket as an admission decision left it: what the
// x-ratelimit-* headers report.
type Quota struct {
	Limit     int           // the bucket's capacity (burst, or tokens_per_minute)
	Remaining int           // what is left now, >= 0 (a bucket in debt has 0)
	Reset     time.Duration // until the bucket is full again
}

// quotaOf is the Quota of a bucket of capacity cap refilled at perSecond,
// at level.
func quotaOf(level, capacity, perSecond float64) Quota {
	q := Quota{Limit: int(capacity), Remaining: max(0, int(math.Floor(level)))}
	if perSecond > 0 && level < capacity {
		q.Reset = time.Duration(math.Ceil((capacity - level) / perSecond * 1e9))
	}
	return q
}

// Quota is the tenant's request-rate bucket after this request took from
// it; false when the tenant's rps is unlimited.
func (p *Pass) Quota() (Quota, bool) {
	if p == nil || p.quota == nil {
		return Quota{}, false
	}
	return *p.quota, true
}

// Quota is the tenant's token bucket after this miss's up-front charge;
// false when the tenant's tokens_per_minute is unlimited.
func (c *Charge) Quota() (Quota, bool) {
	if c == nil || c.quota == nil {
		return Quota{}, false
	}
	return *c.quota, true
}
