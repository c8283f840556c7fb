package admission

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"
)

// Pass is an admitted request's hold on its tenant's in-flight count and
// concurrency slot. Release it when the response (or stream) ends.
type Pass struct {
	a        *Admitter
	ts       *tenantState
	slot     *localTenant // holds a local concurrency slot
	lease    string       // holds a Redis lease
	quota    *Quota       // the tenant's request bucket; nil: unlimited
	released atomic.Bool
}

// Release gives the slot back. Idempotent, safe on nil, safe from defer
// and after Close. A Redis lease is removed with one call; if that fails,
// the lease expires within LeaseTTL.
func (p *Pass) Release() {
	if p == nil || !p.released.CompareAndSwap(false, true) {
		return
	}
	p.ts.inflight.Add(-1)
	if p.slot != nil {
		p.slot.releaseSlot()
		p.ts.signal()
	}
	if p.lease != "" {
		p.a.rs.release(p.ts, p.lease)
		p.ts.signal()
	}
}

// signal wakes one waiter for a concurrency slot, if any.
func (ts *tenantState) signal() {
	select {
	case ts.wake <- struct{}{}:
	default:
	}
}

// Enter admits a request, hit or miss, against its tenant's request rate
// and concurrency cap, waiting up to MaxWait for capacity. The pass must be
// released. ctx ends a wait early (the request is then rejected).
func (a *Admitter) Enter(ctx context.Context, tenant string) (*Pass, *Rejection) {
	ts := a.tenant(tenant)
	ts.inflight.Add(1)
	p := &Pass{a: a, ts: ts}
	if !ts.enterLimited {
		return p, nil
	}
	start := a.now()
	deadline := start + int64(a.cfg.MaxWait)
	poll := pollMin
	for {
		remaining := time.Duration(max(deadline-a.now(), 0))
		v := a.enterOnce(ts, p, remaining)
		if v.ok {
			if v.wait > 0 {
				if err := a.sleep(ctx, v.wait); err != nil {
					a.cancelEnter(ts, v)
					p.Release()
					return nil, a.reject(ts, start, canceled(v.limit, err))
				}
			}
			a.m.observeWait(start, a.now())
			return p, nil
		}
		if !v.full || remaining <= 0 {
			p.Release()
			return nil, a.reject(ts, start, a.rejection(ts, v))
		}
		// Wait for a slot: a local release signals; other replicas' are
		// polled when the cap lives in Redis.
		wait := remaining
		if v.redis {
			wait = min(poll, remaining)
			poll = min(2*poll, pollMax)
		}
		t := time.NewTimer(wait)
		select {
		case <-ts.wake:
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			p.Release()
			return nil, a.reject(ts, start, canceled(LimitTenantConcurrency, ctx.Err()))
		}
		t.Stop()
	}
}

// verdict is one decision's outcome.
type verdict struct {
	ok       bool
	wait     time.Duration // ok: reserved capacity is due after wait; else Retry-After
	limit    string        // the limit that made it wait or refused it
	full     bool          // refused by the concurrency cap
	oversize bool
	redis    bool   // decided in Redis
	tokens   int    // AdmitMiss: the tokens asked for, for the message
	quota    *Quota // admitted: the tenant's bucket (rps for Enter, tokens for AdmitMiss)
}

// enterOnce makes one Enter decision, in Redis or locally, and on success
// records the slot on p.
func (a *Admitter) enterOnce(ts *tenantState, p *Pass, maxWait time.Duration) verdict {
	if a.useRedis() {
		v, lease, err := a.rs.enter(a, ts, maxWait)
		if err == nil {
			a.rs.health.ok()
			p.lease, p.quota = lease, v.quota
			return v
		}
		a.redisFailed()
	} else if a.rs != nil {
		a.fellBack()
	}
	v := ts.local.enter(a.now(), maxWait)
	if v.ok && ts.lim.MaxConcurrency > 0 {
		p.slot = ts.local
	}
	p.quota = v.quota
	return v
}

// cancelEnter gives back the request-rate reservation of a request that
// gave up waiting for it.
func (a *Admitter) cancelEnter(ts *tenantState, v verdict) {
	if ts.lim.RPS <= 0 {
		return
	}
	if v.redis {
		_ = a.rs.adjust([]adjustment{{ts.rpsKey, ts.rpsRate, ts.rpsCap, 1}})
		return
	}
	ts.local.refundRPS(a.now())
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("admission wait: %w", ctx.Err())
	}
}
