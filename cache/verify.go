package cache

import (
	"errors"
	"fmt"
	"frontdoor/internal/units"
	"math"
	"strings"
	"sync"
	"time"
)

// VerifyConfig is cache.semantic.verify: a judge model re-checks a share of
// the semantic hits, and the gateway estimates from its verdicts how often
// a semantic hit is wrong.
type VerifyConfig struct {
	// JudgeModel is the model asked whether a cached question's answer
	// serves a new question; "" turns verification off.
	JudgeModel string `yaml:"judge_model"`
	// AuditRate is the share of semantic hits the judge re-checks.
	AuditRate float64 `yaml:"audit_rate"`
	// MaxJudgeRPS caps the judge calls a second; Queue is how many hits may
	// wait for one (a full queue drops the audit, counted).
	MaxJudgeRPS float64 `yaml:"max_judge_rps"`
	Queue       int     `yaml:"queue"`
	// JudgeTimeout bounds one judge call, retries included: a slow judge
	// fails (and shows as failing) instead of holding a worker.
	JudgeTimeout units.Duration `yaml:"judge_timeout"`
	// Spillover lets judge calls go to the hosted API when no node serving
	// JudgeModel takes them.
	Spillover bool `yaml:"spillover"`
	// TargetFalseHitRate is the false-hit rate the operator accepts: a
	// WARN line when the estimate's upper bound passes it, and (when set)
	// each tenant and model's threshold moves to the lowest one whose
	// judged evidence keeps the rate under it with confidence, within
	// [MinThreshold, MaxThreshold]. 0: no target, the threshold is fixed.
	TargetFalseHitRate float64 `yaml:"target_false_hit_rate"`
	MinThreshold       float64 `yaml:"min_threshold"`
	MaxThreshold       float64 `yaml:"max_threshold"`
	// GreyZone: a miss whose best candidate (guards passed) lies this much
	// below the threshold or less is judged too, after it went upstream:
	// the evidence that lets a threshold come down.
	GreyZone float64 `yaml:"grey_zone"`
	// PromotePerMinute and PromoteMax bound each tenant's promotions (a
	// near-miss the judge approved against a curated entry, stored with
	// its answer): at most PromotePerMinute in a clock minute, and at most
	// PromoteMax within the longest life of an entry (cache.ttl or
	// max_ttl) from the first one counted. 0 turns promotion off. With the
	// cache in Redis the counts are the replicas' together.
	PromotePerMinute int `yaml:"promote_per_minute"`
	PromoteMax       int `yaml:"promote_max"`
}

// DefaultVerifyConfig is off, with the rest ready for a judge_model.
func DefaultVerifyConfig() VerifyConfig {
	return VerifyConfig{AuditRate: 0.05, MaxJudgeRPS: 5, Queue: 256, JudgeTimeout: units.Duration(10 * time.Second),
		MinThreshold: 0.75, MaxThreshold: 0.99, GreyZone: 0.05, PromotePerMinute: 10, PromoteMax: 1000}
}

// Bounds of the promotion limits.
const (
	maxPromotePerMinute = 100_000
	maxPromoteMax       = 100_000_000
)

// Enabled reports whether a judge is configured.
func (c VerifyConfig) Enabled() bool { return c.JudgeModel != "" }

// Validate checks the section.
func (c VerifyConfig) Validate() error {
	var errs []error
	if c.JudgeModel != strings.TrimSpace(c.JudgeModel) {
		errs = append(errs, errors.New("judge_model: must not have surrounding spaces"))
	}
	if c.AuditRate < 0 || c.AuditRate > 1 {
		errs = append(errs, errors.New("audit_rate: must be between 0 and 1"))
	}
	if c.MaxJudgeRPS <= 0 {
		errs = append(errs, errors.New("max_judge_rps: must be > 0"))
	}
	if c.JudgeTimeout <= 0 {
		errs = append(errs, errors.New("judge_timeout: must be > 0"))
	}
	if c.Queue < 1 || c.Queue > 1_000_000 {
		errs = append(errs, errors.New("queue: must be between 1 and 1000000"))
	}
	if c.TargetFalseHitRate < 0 || c.TargetFalseHitRate >= 1 {
		errs = append(errs, errors.New("target_false_hit_rate: must be in [0, 1)"))
	}
	if c.MinThreshold <= 0 || c.MinThreshold > c.MaxThreshold || c.MaxThreshold > 1 {
		errs = append(errs, errors.New("min_threshold, max_threshold: must satisfy 0 < min_threshold <= max_threshold <= 1"))
	}
	if c.GreyZone < 0 || c.GreyZone >= 0.5 {
		errs = append(errs, errors.New("grey_zone: must be in [0, 0.5)"))
	}
	if c.PromotePerMinute < 0 || c.PromotePerMinute > maxPromotePerMinute {
		errs = append(errs, fmt.Errorf("promote_per_minute: must be between 0 (no promotions) and %d", maxPromotePerMinute))
	}
	if c.PromoteMax < 0 || c.PromoteMax > maxPromoteMax {
		errs = append(errs, fmt.Errorf("promote_max: must be between 0 (no promotions) and %d", maxPromoteMax))
	}
	return errors.Join(errs...)
}

// Verdict is a judge's answer on whether a cached answer serves a question.
type Verdict uint8

// Verdicts; Unsure counts for nothing.
const (
	VerdictUnsure Verdict = iota
	VerdictYes
	VerdictNo
)

func (v Verdict) String() string { return [...]string{"unsure", "yes", "no"}[v] }

// ParseVerdict reads a judge's reply: its first word decides, yes or no
// (any case, trailing punctuation ignored; 是 and 否 count too), after a
// leading <think>…</think> block if there is one; anything else is unsure.
func ParseVerdict(reply string) Verdict {
	w := strings.ToLower(strings.TrimSpace(reply))
	if rest, ok := strings.CutPrefix(w, "<think>"); ok {
		_, after, closed := strings.Cut(rest, "</think>")
		if !closed {
			return VerdictUnsure
		}
		w = strings.TrimSpace(after)
	}
	if i := strings.IndexFunc(w, func(r rune) bool { return r == ' ' || r == '\n' || r == '\t' }); i >= 0 {
		w = w[:i]
	}
	w = strings.TrimRight(w, ".,;:!?。，！？")
	switch w {
	case "yes", "是":
		return VerdictYes
	case "no", "否":
		return VerdictNo
	}
	return VerdictUnsure
}

// Interval is a proportion estimated from samples, with its 95% Wilson
// score interval.
type Interval struct {
	Estimate float64 `json:"estimate"`
	Lower    float64 `json:"lower"`
	Upper    float64 `json:"upper"`
	Samples  int64   `json:"samples"`
}

// Wilson is the proportion k of n with its 95% Wilson score interval; all
// zero when n is 0 (nothing is known).
func Wilson(k, n int64) Interval {
	if n <= 0 {
		return Interval{}
	}
	const z = 1.959963984540054
	p, nf := float64(k)/float64(n), float64(n)
	den := 1 + z*z/nf
	mid := (p + z*z/(2*nf)) / den
	half := z * math.Sqrt(p*(1-p)/nf+z*z/(4*nf*nf)) / den
	return Interval{Estimate: p, Lower: math.Max(0, mid-half), Upper: math.Min(1, mid+half), Samples: n}
}

// FalseHits tallies judged semantic hits, overall and per tenant and model.
// The false-hit rate is the share of judged hits (yes or no) that were
// wrong (no).
type FalseHits struct {
	mu    sync.Mutex
	all   tally
	scope map[[2]string]*tally
}

// tally counts verdicts; cur* since the scope's threshold last moved.
type tally struct{ yes, no, unsure, curYes, curNo int64 }

// Add records a verdict on a hit served to tenant for model.
func (f *FalseHits) Add(tenant, model string, v Verdict) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.scope == nil {
		f.scope = map[[2]string]*tally{}
	}
	t := f.scope[[2]string{tenant, model}]
	if t == nil {
		t = &tally{}
		f.scope[[2]string{tenant, model}] = t
	}
	for _, t := range []*tally{&f.all, t} {
		switch v {
		case VerdictYes:
			t.yes++
			t.curYes++
		case VerdictNo:
			t.no++
			t.curNo++
		default:
			t.unsure++
		}
	}
}

// Moved starts the current rate of tenant and model again: its threshold
// has moved, and the hits judged before were served under another.
func (f *FalseHits) Moved(tenant, model string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if t := f.scope[[2]string{tenant, model}]; t != nil {
		t.curYes, t.curNo = 0, 0
	}
}

// ScopedInterval is the false-hit rate of one tenant and model.
type ScopedInterval struct {
	Tenant string `json:"tenant"`
	Model  string `json:"model"`
	Interval
	Unsure int64 `json:"unsure"`
	// Current is the rate since the scope's threshold last moved: of the
	// hits served under the threshold in force.
	Current Interval `json:"current"`
}

// Rate is the overall false-hit rate.
func (f *FalseHits) Rate() Interval {
	f.mu.Lock()
	defer f.mu.Unlock()
	return Wilson(f.all.no, f.all.yes+f.all.no)
}

// Scopes lists the false-hit rate of every tenant and model judged.
func (f *FalseHits) Scopes() []ScopedInterval {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]ScopedInterval, 0, len(f.scope))
	for k, t := range f.scope {
		out = append(out, ScopedInterval{Tenant: k[0], Model: k[1], Interval: Wilson(t.no, t.yes+t.no), Unsure: t.unsure,
			Current: Wilson(t.curNo, t.curYes+t.curNo)})
	}
	return out
}

// String is for logs: "3.2% [1.1%, 8.0%] of 120".
func (i Interval) String() string {
	return fmt.Sprintf("%.1f%% [%.1f%%, %.1f%%] of %d", 100*i.Estimate, 100*i.Lower, 100*i.Upper, i.Samples)
}
