package gpusim

import (
	"sync"
	"time"
)

// rateLimiter is a token bucket holding up to rpm tokens, refilled at rpm
// per minute: a burst of rpm requests passes, then one every 60s/rpm.
type rateLimiter struct {
	mu     sync.Mutex
	burst  float64
	tokens float64
	perSec float64
	last   time.Time
}

func newRateLimiter(rpm int, now time.Time) *rateLimiter {
	return &rateLimiter{burst: float64(rpm), tokens: float64(rpm), perSec: float64(rpm) / 60, last: now}
}

func (r *rateLimiter) allow(now time.Time) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if el := now.Sub(r.last).Seconds(); el > 0 {
		r.tokens = min(r.burst, r.tokens+el*r.perSec)
		r.last = now
	}
	if r.tokens < 1 {
		return false
	}
	r.tokens--
	return true
}
