package cache

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Why a promotion the judge approved is refused by PromoteLimits.
const (
	PromoteRefusedPerMinute = "per_minute" // the tenant's promote_per_minute is used up this minute
	PromoteRefusedMax       = "max"        // the tenant's promote_max is used up for the window
)

// PromoteLimits counts each tenant's promotions against
// VerifyConfig.PromotePerMinute (per clock minute) and PromoteMax (per
// window, the longest life of an entry, from the first promotion counted:
// a promoted entry outlives no window after its own, so at most twice
// PromoteMax of a tenant's promoted entries are alive at once). With
// Redis the replicas count together, in a hash per tenant under
// <key_prefix>v:pr:, one script call a promotion, made by the judge's
// worker off the request path; without it each process counts alone.
type PromoteLimits struct {
	perMinute, max int
	window         time.Duration

	redis   redis.UniversalClient
	prefix  string
	timeout time.Duration

	mu    sync.Mutex
	local map[string]*promoteCount
}

// promoteCount is one tenant's count in the process.
type promoteCount struct {
	minute   int64 // the clock minute inMinute counts
	inMinute int
	since    time.Time // start of the window n counts
	n        int
}

// NewPromoteLimits counts under c's limits; shared (nil: in the process)
// is where the replicas' evidence is kept, and its Redis holds the counts.
func NewPromoteLimits(c VerifyConfig, window time.Duration, shared *SharedEvidence) *PromoteLimits {
	l := &PromoteLimits{perMinute: c.PromotePerMinute, max: c.PromoteMax, window: max(window, time.Minute),
		local: map[string]*promoteCount{}}
	if shared != nil {
		l.redis, l.prefix, l.timeout = shared.Redis, shared.Prefix+"pr:", shared.Timeout
	}
	return l
}

// Shared reports whether the counts are the replicas' together.
func (l *PromoteLimits) Shared() bool { return l.redis != nil }

// Take counts one promotion of tenant at now, or returns why it is
// refused (PromoteRefused*; "" when counted). A refused promotion is not
// counted. An error means the shared count could not be read: nothing is
// counted and the caller refuses.
func (l *PromoteLimits) Take(ctx context.Context, tenant string, now time.Time) (refused string, err error) {
	if l.perMinute == 0 {
		return PromoteRefusedPerMinute, nil
	}
	if l.max == 0 {
		return PromoteRefusedMax, nil
	}
	minute := now.Unix() / 60
	if l.redis != nil {
		ctx, cancel := context.WithTimeout(ctx, l.timeout)
		defer cancel()
		r, err := promoteScript.Run(ctx, l.redis, []string{l.prefix + tenant}, minute, l.perMinute, l.max,
			l.window.Milliseconds()).Int()
		if err != nil {
			return "", fmt.Errorf("shared promotion count: %w", err)
		}
		return promoteRefusals[min(max(r, 0), len(promoteRefusals)-1)], nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	c := l.local[tenant]
	if c == nil {
		c = &promoteCount{}
		l.local[tenant] = c
	}
	if c.minute != minute {
		c.minute, c.inMinute = minute, 0
	}
	if c.n == 0 || now.Sub(c.since) >= l.window {
		c.since, c.n = now, 0
	}
	switch {
	case c.inMinute >= l.perMinute:
		return PromoteRefusedPerMinute, nil
	case c.n >= l.max:
		return PromoteRefusedMax, nil
	}
	c.inMinute++
	c.n++
	return "", nil
}

// promoteRefusals is promoteScript's answer as a reason.
var promoteRefusals = [...]string{"", PromoteRefusedPerMinute, PromoteRefusedMax}

// promoteScript counts a promotion in the tenant's hash KEYS[1]: fields m
// (the minute ARGV[1] that mc counts) and n (the window's count; the key
// expires ARGV[4] ms after the window's first). It answers 0 when counted,
// 1 over ARGV[2] a minute, 2 over ARGV[3] a window.
var promoteScript = redis.NewScript(`
local v = redis.call('HMGET', KEYS[1], 'm', 'mc', 'n')
local mc = 0
if v[1] == ARGV[1] then mc = tonumber(v[2]) or 0 end
if mc >= tonumber(ARGV[2]) then return 1 end
local n = tonumber(v[3]) or 0
if n >= tonumber(ARGV[3]) then return 2 end
redis.call('HSET', KEYS[1], 'm', ARGV[1], 'mc', mc + 1, 'n', n + 1)
if n == 0 then redis.call('PEXPIRE', KEYS[1], ARGV[4]) end
return 0
`)
