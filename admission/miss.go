package admission

import (
	"context"
	"sync/atomic"
)

// Charge is a cache miss's hold on the token budgets, settled against the
// real usage when the response ends.
type Charge struct {
	a       *Admitter
	ts      *tenantState
	tokens  int
	redis   bool // charged in Redis, else in the local buckets
	free    bool // nothing was charged
	quota   *Quota
	settled atomic.Bool
}

var freeCharge = &Charge{free: true}

// Tokens is the up-front charge.
func (c *Charge) Tokens() int {
	if c == nil {
		return 0
	}
	return c.tokens
}

// Settle charges the tokens the upstream really used (usage.total_tokens)
// instead of the up-front estimate: unused tokens go back to the budgets,
// extra ones are taken (a budget may go into debt, down to minus one
// minute's worth). A negative actual means unknown: the up-front charge
// stands. Idempotent and safe on nil; at most one Redis call.
func (c *Charge) Settle(actual int) {
	if c == nil || c.free || !c.settled.CompareAndSwap(false, true) || actual < 0 {
		return
	}
	delta := c.tokens - actual // > 0: refund
	if delta == 0 {
		return
	}
	a, ts := c.a, c.ts
	if c.redis {
		adj := make([]adjustment, 0, 2)
		if ts.missLimited {
			adj = append(adj, adjustment{ts.tpmKey, ts.tpmRate, ts.tpmCap, float64(delta)})
		}
		if a.global.TokensPerMinute > 0 {
			adj = append(adj, adjustment{a.rs.gTPMKey, a.rs.gTPMRate, a.rs.gTPMCap, float64(delta)})
		}
		if len(adj) > 0 {
			_ = a.rs.adjust(adj) // lost on a Redis failure: the estimate stands
		}
		return
	}
	now := a.now()
	if ts.local != nil {
		ts.local.adjustTokens(now, float64(delta))
	}
	a.local.adjustTokens(now, float64(delta))
}

// AdmitMiss admits a cache miss of tokens (the up-front charge, see
// UpfrontTokens) against the tenant's token budget and the global request
// rate and token budget, waiting up to MaxWait. Call it after Enter, for
// misses only; Settle the charge when the response ends. A request whose
// tokens alone exceed a budget is rejected at once (Oversize).
func (a *Admitter) AdmitMiss(ctx context.Context, tenant string, tokens int) (*Charge, *Rejection) {
	ts := a.tenant(tenant)
	if !ts.missLimited && !a.gLimited {
		return freeCharge, nil
	}
	tokens = max(tokens, 0)
	start := a.now()
	if ts.missLimited && tokens > ts.lim.TokensPerMinute {
		return nil, a.reject(ts, start, a.rejection(ts, verdict{limit: LimitTenantTokens, oversize: true, tokens: tokens}))
	}
	if a.global.TokensPerMinute > 0 && tokens > a.global.TokensPerMinute {
		return nil, a.reject(ts, start, a.rejection(ts, verdict{limit: LimitGlobalTokens, oversize: true, tokens: tokens}))
	}
	c := &Charge{a: a, ts: ts, tokens: tokens}
	var v verdict
	if a.useRedis() {
		var err error
		v, err = a.rs.miss(a, ts, tokens, a.cfg.MaxWait)
		if err == nil {
			a.rs.health.ok()
		} else {
			a.redisFailed()
		}
		c.redis = err == nil
	} else if a.rs != nil {
		a.fellBack()
	}
	if !c.redis {
		v = a.local.miss(ts.local, a.now(), float64(tokens), a.cfg.MaxWait)
	}
	if !v.ok {
		v.tokens = tokens
		return nil, a.reject(ts, start, a.rejection(ts, v))
	}
	if v.wait > 0 {
		if err := a.sleep(ctx, v.wait); err != nil {
			a.cancelMiss(c)
			return nil, a.reject(ts, start, canceled(v.limit, err))
		}
	}
	a.m.observeWait(start, a.now())
	c.quota = v.quota
	return c, nil
}

// cancelMiss gives back everything a miss reserved (it gave up waiting).
func (a *Admitter) cancelMiss(c *Charge) {
	c.settled.Store(true)
	ts, t := c.ts, float64(c.tokens)
	if c.redis {
		adj := make([]adjustment, 0, 3)
		if ts.missLimited {
			adj = append(adj, adjustment{ts.tpmKey, ts.tpmRate, ts.tpmCap, t})
		}
		if a.global.RPS > 0 {
			adj = append(adj, adjustment{a.rs.gRPSKey, a.rs.gRPSRate, a.rs.gRPSCap, 1})
		}
		if a.global.TokensPerMinute > 0 {
			adj = append(adj, adjustment{a.rs.gTPMKey, a.rs.gTPMRate, a.rs.gTPMCap, t})
		}
		_ = a.rs.adjust(adj)
		return
	}
	now := a.now()
	if ts.local != nil {
		ts.local.adjustTokens(now, t)
	}
	a.local.refund(now, t)
}

// UpfrontTokens is the up-front charge of a miss: its prompt tokens (see
// CountTokens) plus its completion allowance, max_tokens (DefaultMaxTokens
// when the request sets none) for each of its n choices.
func (a *Admitter) UpfrontTokens(promptTokens, maxTokens, n int) int {
	if maxTokens <= 0 {
		maxTokens = a.cfg.DefaultMaxTokens
	}
	return max(promptTokens, 0) + max(maxTokens, 0)*max(n, 1)
}

// CountsTokens reports whether a miss of tenant is charged by tokens (its
// own or the global tokens_per_minute), so that the caller counts prompt
// tokens only when they matter.
func (a *Admitter) CountsTokens(tenant string) bool {
	if a.global.TokensPerMinute > 0 {
		return true
	}
	ts, ok := (*a.tenants.Load())[tenant]
	return ok && ts.lim.TokensPerMinute > 0
}
