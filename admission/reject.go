package admission

import (
	"fmt"
	"strconv"
	"time"
)

// rejection builds the client-facing Rejection for v.
func (a *Admitter) rejection(ts *tenantState, v verdict) *Rejection {
	r := &Rejection{Limit: v.limit, RetryAfter: v.wait, Oversize: v.oversize}
	q := strconv.Quote(ts.name)
	switch v.limit {
	case LimitTenantRPS:
		r.Message = fmt.Sprintf("tenant %s is over its request rate limit (%s requests/s, burst %s)", q, fmtFloat(ts.lim.RPS), fmtFloat(ts.lim.burst()))
	case LimitTenantConcurrency:
		r.Message = fmt.Sprintf("tenant %s has %d requests in flight, its max_concurrency", q, ts.lim.MaxConcurrency)
		if v.unshared {
			r.Message = fmt.Sprintf("tenant %s's max_concurrency (%d) is shared through Redis, which does not answer, so no request of it can be admitted safely", q, ts.lim.MaxConcurrency)
			r.RetryAfter = a.cfg.RedisRetry
		}
		if r.RetryAfter <= 0 {
			r.RetryAfter = time.Second // unknowable: when a request ends
		}
	case LimitTenantTokens:
		if v.oversize {
			r.Message = fmt.Sprintf("request needs about %d tokens, more than tenant %s's budget of %d tokens per minute; it can never be admitted (lower max_tokens or shorten the prompt)", v.tokens, q, ts.lim.TokensPerMinute)
		} else {
			r.Message = fmt.Sprintf("tenant %s is over its token budget (%d tokens per minute)", q, ts.lim.TokensPerMinute)
		}
	case LimitGlobalRPS:
		r.Message = fmt.Sprintf("the gateway is over its global request rate for uncached requests (%s requests/s)", fmtFloat(a.global.RPS))
	case LimitGlobalTokens:
		if v.oversize {
			r.Message = fmt.Sprintf("request needs about %d tokens, more than the gateway's global budget of %d tokens per minute; it can never be admitted", v.tokens, a.global.TokensPerMinute)
		} else {
			r.Message = fmt.Sprintf("the gateway is over its global token budget for uncached requests (%d tokens per minute)", a.global.TokensPerMinute)
		}
	}
	if !r.Oversize {
		r.Message += "; retry after " + strconv.Itoa(r.RetryAfterSeconds()) + "s"
	}
	return r
}

// reject counts r and returns it.
func (a *Admitter) reject(ts *tenantState, start int64, r *Rejection) *Rejection {
	a.m.rejected(ts.name, r.Limit)
	a.m.observeWait(start, a.now())
	return r
}

func canceled(limit string, err error) *Rejection {
	return &Rejection{Limit: limit, RetryAfter: time.Second, Message: "gave up waiting for admission: " + err.Error()}
}
