package balancer

import (
	"context"
	"fmt"
	"time"
)

// verdict is why a node may or may not take a request now.
type verdict uint8

const (
	admitOK verdict = iota
	admitUnhealthy
	admitDrained
	admitBreakerOpen // open, or half-open with every trial slot taken
	admitEjected
	admitFull
)

var verdictNames = [...]string{"ok", "unhealthy", "drained", "breaker_open", "ejected", "full"}

func (v verdict) String() string { return verdictNames[v] }

// admit applies the filters (serving the model is the caller's: it only
// passes nodes that do).
func (n *Node) admit(now int64) verdict {
	switch {
	case !n.healthy.Load():
		return admitUnhealthy
	case n.drained.Load() || n.retired.Load():
		return admitDrained
	case n.inflight.Load() >= int64(n.cfg.MaxConcurrency):
		return admitFull
	case !n.breakerAllows(now):
		return admitBreakerOpen
	case n.ejected.Load():
		return admitEjected
	}
	return admitOK
}

// AnyUsable reports whether some node serving model is healthy, not drained
// and not cut off by its breaker, whatever its load.
func (p *Pool) AnyUsable(model string) bool {
	now := p.nowNanos()
	for _, n := range p.set.Load().byModel[model] {
		if n.mismatched(model) {
			continue
		}
		if v := n.admit(now); v == admitOK || v == admitFull || v == admitEjected {
			return true
		}
	}
	return false
}

// Ready reports whether at least one node is healthy and not drained.
func (p *Pool) Ready() bool {
	for _, n := range p.set.Load().nodes {
		if n.healthy.Load() && !n.drained.Load() {
			return true
		}
	}
	return false
}

// WaitForSlot blocks until a node serving model could take a request (a
// Release, an undrain or a recovery wakes it; nothing polls), maxWait
// passes or ctx ends. It reports whether a slot looked free; the caller
// must still Pick and TryAcquire, and may lose the race and wait again.
func (p *Pool) WaitForSlot(ctx context.Context, model string, maxWait time.Duration) bool {
	q := p.set.Load().queues[model]
	if q == nil {
		return false
	}
	if p.hasSlot(model) {
		return true
	}
	if maxWait <= 0 {
		return false
	}
	q.waiters.Add(1)
	defer q.waiters.Add(-1)
	t := time.NewTimer(maxWait)
	defer t.Stop()
	for {
		ch := q.wait()
		// Checked after taking the channel: a Release in between closed an
		// older channel, but its slot is seen here.
		if p.hasSlot(model) {
			return true
		}
		select {
		case <-ch:
		case <-t.C:
			return false
		case <-ctx.Done():
			return false
		}
	}
}

// hasSlot reports whether Pick would return a node for model now.
func (p *Pool) hasSlot(model string) bool {
	now := p.nowNanos()
	ejected, full := false, false
	for _, n := range p.set.Load().byModel[model] {
		if n.mismatched(model) {
			continue
		}
		switch n.admit(now) {
		case admitOK:
			return true
		case admitEjected:
			ejected = ejected || n.admitIgnoringEjection(now)
		case admitFull:
			full = full || !n.ejected.Load()
		}
	}
	return ejected && !full
}

// Drain stops new requests to the node called name; its in-flight requests
// finish.
func (p *Pool) Drain(name string) error {
	n := p.Node(name)
	if n == nil {
		return fmt.Errorf("drain %q: %w", name, ErrUnknownNode)
	}
	n.drained.Store(true)
	return nil
}

// Undrain lets the node called name take requests again.
func (p *Pool) Undrain(name string) error {
	n := p.Node(name)
	if n == nil {
		return fmt.Errorf("undrain %q: %w", name, ErrUnknownNode)
	}
	if n.drained.Swap(false) {
		n.wake()
	}
	return nil
}
