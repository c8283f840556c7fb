package admin

import (
	"sync"
	"time"

	"frontdoor/adapters"
)

// Wrong admin tokens at /admin/login are limited to a bucket of
// loginFailBurst that refills at one every loginFailEvery, across all
// clients: past it, every login (right or wrong) waits with a 429 and
// Retry-After, so a token cannot be guessed at speed, and the WARN line
// for wrong tokens is written at most once per loginFailEvery with a count
// of those not logged.
const (
	loginFailBurst = 10
	loginFailEvery = 6 * time.Second
)

type loginLimit struct {
	mu       sync.Mutex
	tokens   float64
	at       time.Time
	started  bool
	lastWarn time.Time
	quiet    int // wrong tokens not logged since lastWarn
}

// wait returns how long a login must wait before it is tried, 0 if now.
func (l *loginLimit) wait(now time.Time) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.refillLocked(now)
	if l.tokens >= 1 {
		return 0
	}
	return time.Duration((1 - l.tokens) * float64(loginFailEvery))
}

// failed takes a token for a wrong login and reports whether to log it,
// with how many went unlogged before it.
func (l *loginLimit) failed(now time.Time) (log bool, unlogged int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.refillLocked(now)
	l.tokens = max(0, l.tokens-1)
	if now.Sub(l.lastWarn) < loginFailEvery {
		l.quiet++
		return false, 0
	}
	unlogged, l.quiet, l.lastWarn = l.quiet, 0, now
	return true, unlogged
}

func (l *loginLimit) refillLocked(now time.Time) {
	if !l.started {
		l.tokens, l.at, l.started = loginFailBurst, now, true
		return
	}
	l.tokens = min(loginFailBurst, l.tokens+float64(now.Sub(l.at))/float64(loginFailEvery))
	l.at = now
}

func errLoginThrottled(wait time.Duration) *adapters.APIError {
	secs := max(1, int((wait+time.Second-1)/time.Second))
	return &adapters.APIError{Status: 429, Type: adapters.TypeRateLimit, Code: "admin_login_throttled", RetryAfter: secs,
		Message: "too many wrong admin tokens at /admin/login; retry after the Retry-After seconds"}
}
