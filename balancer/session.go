package balancer

import (
	"sync"
	"sync/atomic"

	"github.com/VictoriaMetrics/metrics"
)

// maxSessions bounds the conversations remembered (about 50 bytes each):
// past it, the older half by last use is forgotten.
const maxSessions = 1 << 16

// Session outcomes, as counted in frontdoor_balancer_sessions_total.
const (
	SessionNew    = "new"    // no node known for the conversation
	SessionStayed = "stayed" // routed to the node of its previous turn
	SessionMoved  = "moved"  // routed elsewhere: its node was loaded past the margin, full, down or failed
)

// sessionTable remembers the node of each conversation's last turn
// (keyed by Prefix.session), so that a conversation stays on the node that
// holds its history. It sees this gateway's traffic only.
type sessionTable struct {
	mu     sync.Mutex
	byKey  map[uint64]sessionEntry
	counts [3]atomic.Uint64 // new, stayed, moved
	m      [3]atomic.Pointer[metrics.Counter]
}

var sessionOutcomes = [3]string{SessionNew, SessionStayed, SessionMoved}

func (t *sessionTable) count(i int) {
	t.counts[i].Add(1)
	if c := t.m[i].Load(); c != nil {
		c.Inc()
	}
}

// register makes frontdoor_balancer_sessions_total{outcome} on set.
func (t *sessionTable) register(set *metrics.Set) {
	for i, o := range sessionOutcomes {
		c := sessionsFamily.GetOrCreateCounter(set, "outcome", o)
		c.Set(t.counts[i].Load())
		t.m[i].Store(c)
	}
}

type sessionEntry struct {
	node *Node
	at   int64 // unix ns of the last turn
}

// home returns the node of the conversation's last turn, or nil.
func (t *sessionTable) home(key uint64) *Node {
	if key == 0 {
		return nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.byKey[key].node
}

// routed records that a turn of the conversation went to n.
func (t *sessionTable) routed(key uint64, n *Node, now int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.byKey == nil {
		t.byKey = make(map[uint64]sessionEntry, 256)
	}
	old, ok := t.byKey[key]
	switch {
	case !ok:
		t.count(0)
	case old.node.cfg.Name == n.cfg.Name:
		t.count(1)
	default:
		t.count(2)
	}
	t.byKey[key] = sessionEntry{node: n, at: now}
	if len(t.byKey) > maxSessions {
		t.pruneLocked()
	}
}

// pruneLocked forgets the older half of the conversations by last use.
func (t *sessionTable) pruneLocked() {
	var oldest, newest int64
	first := true
	for _, e := range t.byKey {
		if first || e.at < oldest {
			oldest = e.at
		}
		if first || e.at > newest {
			newest = e.at
		}
		first = false
	}
	cut := oldest + (newest-oldest)/2
	for k, e := range t.byKey {
		if e.at <= cut {
			delete(t.byKey, k)
		}
	}
}

// SessionStatus is what the balancer knows of conversations.
type SessionStatus struct {
	Tracked int               `json:"tracked"` // conversations remembered
	Turns   map[string]uint64 `json:"turns"`   // routed turns by outcome: new, stayed, moved
}

// Sessions returns the conversation table's size and counts.
func (p *Pool) Sessions() SessionStatus {
	t := &p.sessions
	t.mu.Lock()
	n := len(t.byKey)
	t.mu.Unlock()
	st := SessionStatus{Tracked: n, Turns: map[string]uint64{}}
	for i, o := range sessionOutcomes {
		st.Turns[o] = t.counts[i].Load()
	}
	return st
}
