package cache

import (
	"math"
	"sync"
)

// Learner keeps, per tenant and model, the judged evidence and the
// threshold it has moved, and the entries judged wrong, each with the
// highest similarity at which it was. It is safe for concurrent use.
type Learner struct {
	cfg    VerifyConfig
	mu     sync.Mutex
	scopes map[[2]string]*learnScope
	wrong  map[string]float32
}

type learnScope struct {
	evidence  Evidence
	threshold float64
	moved     bool // false: the configured threshold applies
}

// NewLearner learns under cfg's target and range.
func NewLearner(cfg VerifyConfig) *Learner {
	return &Learner{cfg: cfg, scopes: map[[2]string]*learnScope{}, wrong: map[string]float32{}}
}

// Refused reports whether entry was judged wrong for a question at
// similarity sim or closer: it is never served at or below that.
func (l *Learner) Refused(entry string, sim float32) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	s, ok := l.wrong[entry]
	return ok && sim <= s
}

// Threshold is tenant and model's semantic threshold: configured until
// the evidence has moved it (with a target).
func (l *Learner) Threshold(tenant, model string, configured float64) float64 {
	if l.cfg.TargetFalseHitRate == 0 {
		return configured
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if e := l.scopes[[2]string{tenant, model}]; e != nil && e.moved {
		return e.threshold
	}
	return configured
}

// Shared is what the replicas know together of a scope (SharedEvidence).
type Shared struct {
	Evidence     Evidence
	Threshold    float64
	HasThreshold bool
}

// Learn records a verdict on entry for tenant and model at similarity sim
// and moves the scope's threshold one step; configured is the threshold
// before any move. With shared, the replicas' evidence and threshold
// replace this replica's. It returns the threshold before and after the
// step; set is false without a target (no threshold is learned).
func (l *Learner) Learn(tenant, model, entry string, sim float32, wrong bool, configured float64, shared *Shared) (from, to float64, set bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if wrong {
		if len(l.wrong) >= MaxWrongEntries {
			for k := range l.wrong { // forget one at random
				delete(l.wrong, k)
				break
			}
		}
		l.wrong[entry] = max(l.wrong[entry], sim)
	}
	key := [2]string{tenant, model}
	e := l.scopes[key]
	if e == nil {
		e = &learnScope{}
		l.scopes[key] = e
	}
	if shared != nil {
		e.evidence = shared.Evidence
		if shared.HasThreshold {
			e.threshold, e.moved = shared.Threshold, true
		}
	} else {
		e.evidence.Add(sim, wrong)
	}
	if l.cfg.TargetFalseHitRate == 0 {
		return 0, 0, false
	}
	if !e.moved {
		e.threshold = configured
	}
	from = e.threshold
	e.threshold, e.moved = e.evidence.NextThreshold(l.cfg, from), true
	return from, e.threshold, true
}

// Merge takes the replicas' thresholds and entries judged wrong.
func (l *Learner) Merge(thresholds map[[2]string]float64, wrong map[string]float32) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for k, t := range thresholds {
		e := l.scopes[k]
		if e == nil {
			e = &learnScope{}
			l.scopes[k] = e
		}
		e.threshold, e.moved = t, true
	}
	for id, sim := range wrong {
		l.wrong[id] = max(l.wrong[id], sim)
	}
}

// ScopeThreshold is a scope's learned threshold (0: not moved) and the
// judged candidates it rests on.
type ScopeThreshold struct {
	Tenant    string  `json:"tenant"`
	Model     string  `json:"model"`
	Threshold float64 `json:"threshold,omitempty"`
	Samples   int     `json:"samples"`
}

// Thresholds lists every scope's threshold, rounded to 0.001.
func (l *Learner) Thresholds() []ScopeThreshold {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]ScopeThreshold, 0, len(l.scopes))
	for k, e := range l.scopes {
		t := ScopeThreshold{Tenant: k[0], Model: k[1], Samples: e.evidence.Len()}
		if e.moved {
			t.Threshold = math.Round(e.threshold*1000) / 1000
		}
		out = append(out, t)
	}
	return out
}
