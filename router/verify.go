package router

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"frontdoor/adapters"
	"frontdoor/admission"
	"frontdoor/balancer"
	"frontdoor/cache"
	"frontdoor/internal/telemetry"
	"frontdoor/router/admin"
)

// judgeSystemPrompt tells the judge model what it decides. Its first word
// is the verdict (cache.ParseVerdict).
const judgeSystemPrompt = `You check a cache of answers. The user message is a JSON object with two questions: "cached", a question whose answer is stored, and "new", a question just asked. Answer "yes" if the stored answer to "cached" is a correct and complete answer to "new" (the same question in other words, in any language), and "no" if it is not (a different subject, entity, number, date, place, person, unit, negation or scope). Answer with one word, yes or no.

Examples:
{"cached": "How do I reset my password?", "new": "how can i reset my password"} -> yes
{"cached": "What is the capital of France?", "new": "What is the capital of Germany?"} -> no
{"cached": "How many moons does Mars have?", "new": "How many moons does Jupiter have?"} -> no
{"cached": "如何重置我的密码？", "new": "怎么重置密码"} -> yes
{"cached": "北京今天天气怎么样？", "new": "上海今天天气怎么样？"} -> no`

// judgeBody is the judge's chat request for a cached and a new question.
func judgeBody(model, cachedQ, newQ string) []byte {
	user, _ := json.Marshal(struct {
		Cached string `json:"cached"`
		New    string `json:"new"`
	}{cachedQ, newQ})
	b, _ := json.Marshal(map[string]any{
		"model":       model,
		"temperature": 0,
		"max_tokens":  4,
		"messages": []map[string]string{
			{"role": "system", "content": judgeSystemPrompt},
			{"role": "user", "content": string(user)},
		},
	})
	return b
}

// audit is a served semantic hit waiting for the judge.
type audit struct {
	tenant, model string
	cached, asked string
	entry         string
	similarity    float32
}

// verifier re-checks a share of the semantic hits with the judge model,
// off the request path: hits are queued (a full queue drops the audit),
// workers take them under max_judge_rps and ask the judge through the pool
// (and, when allowed, spill-over), never through a tenant's quota. The
// verdicts estimate the false-hit rate (cache.FalseHits).
type verifier struct {
	g       *Gateway
	cfg     cache.VerifyConfig
	queue   chan audit
	rate    *admission.Bucket
	evid    cache.FalseHits
	log     *telemetry.RateLog
	verdict map[cache.Verdict]*metrics.Counter
	errs    *metrics.Counter
	dropped *metrics.Counter

	calls, failures atomic.Int64
	lastErr         atomic.Pointer[string]
	lastFail        atomic.Int64 // unix ns
}

// minEvidence is how many judged hits the target's WARN waits for.
const minEvidence = 30

// judgeWorkers is how many judge calls may be in flight at once.
const judgeWorkers = 4

func newVerifier(g *Gateway, cfg cache.VerifyConfig, set *metrics.Set, log *slog.Logger) *verifier {
	v := &verifier{g: g, cfg: cfg, queue: make(chan audit, cfg.Queue),
		rate: admission.NewBucket(cfg.MaxJudgeRPS, max(1, cfg.MaxJudgeRPS)),
		log:  telemetry.NewRateLog(log, 10*time.Second), verdict: map[cache.Verdict]*metrics.Counter{}}
	for _, vd := range []cache.Verdict{cache.VerdictYes, cache.VerdictNo, cache.VerdictUnsure} {
		v.verdict[vd] = set.NewCounter(`frontdoor_cache_verify_total{kind="audit",verdict="` + vd.String() + `"}`)
	}
	v.errs = set.NewCounter(`frontdoor_cache_verify_total{kind="audit",verdict="error"}`)
	v.dropped = set.NewCounter(`frontdoor_cache_verify_dropped_total`)
	set.NewGauge(`frontdoor_cache_false_hit_ratio`, func() float64 { return v.evid.Rate().Estimate })
	return v
}

// hit offers a served semantic hit for audit; it never blocks.
func (v *verifier) hit(a audit) {
	if v == nil || rand.Float64() >= v.cfg.AuditRate {
		return
	}
	select {
	case v.queue <- a:
	default:
		v.dropped.Inc()
		v.log.Warn("verify-dropped", "cache verify: the judge queue is full; audits are dropped", "queue", v.cfg.Queue)
	}
}

// run is a judge worker; it returns when ctx ends.
func (v *verifier) run(ctx context.Context) {
	for {
		var a audit
		select {
		case <-ctx.Done():
			return
		case a = <-v.queue:
		}
		for wait := v.rate.Take(1); wait > 0; wait = v.rate.Take(1) {
			select {
			case <-ctx.Done():
				return
			case <-time.After(wait):
			}
		}
		v.check(ctx, a)
	}
}

// check asks the judge about one hit and records the verdict.
func (v *verifier) check(ctx context.Context, a audit) {
	vd, err := v.judge(ctx, a.cached, a.asked)
	if err != nil {
		if ctx.Err() != nil {
			return
		}
		v.failures.Add(1)
		v.lastFail.Store(time.Now().UnixNano())
		msg := err.Error()
		v.lastErr.Store(&msg)
		v.errs.Inc()
		v.log.Warn("verify-judge-failed", "cache verify: the judge failed; the audit is lost", "judge_model", v.cfg.JudgeModel, "error", msg)
		return
	}
	v.verdict[vd].Inc()
	v.evid.Add(a.tenant, a.model, vd)
	if vd == cache.VerdictNo {
		v.g.log.Debug("cache verify: a semantic hit was judged wrong", "entry", a.entry, "tenant", a.tenant,
			"model", a.model, "similarity", a.similarity)
	}
	if t := v.cfg.TargetFalseHitRate; t > 0 {
		// The upper bound: the rate may be over the target. Not before
		// minEvidence judged hits, when any interval is wide.
		if r := v.evid.Rate(); r.Samples >= minEvidence && r.Upper > t {
			v.log.Warn("verify-over-target", "cache verify: semantic hits are wrong more often than the target",
				"false_hit_rate", r.String(), "target", t)
		}
	}
}

var errNoJudge = errors.New("no node serving the judge model took the call")

// judge asks the judge model whether the answer to cachedQ serves askedQ,
// on the nodes that serve it (a failure before the first byte moves to the
// next), then on spill-over when allowed.
func (v *verifier) judge(ctx context.Context, cachedQ, askedQ string) (cache.Verdict, error) {
	g := v.g
	v.calls.Add(1)
	id := "judge-" + newRequestID()
	model, ok := g.pool.Resolve(v.cfg.JudgeModel, id)
	if !ok {
		return 0, fmt.Errorf("no node serves the judge model %q", v.cfg.JudgeModel)
	}
	ur := &adapters.UpstreamRequest{Endpoint: adapters.EndpointChat, Body: judgeBody(model, cachedQ, askedQ), RequestID: id, Model: model}
	cands, _ := g.pool.PickWith(model, balancer.Hints{})
	err := errNoJudge
	tries := 0
	for _, n := range cands {
		if tries > g.conf().Balancer.Retries {
			break
		}
		if !n.TryAcquire() {
			continue
		}
		tries++
		var vd cache.Verdict
		vd, err = v.ask(ctx, g.backendFor(n), ur)
		n.Release()
		if err == nil {
			g.pool.Report(n, balancer.OutcomeSuccess, 0)
			return vd, nil
		}
		g.pool.Report(n, balancer.OutcomeFailure, 0)
	}
	if s := g.rt.Load().spill; s != nil && v.cfg.Spillover {
		if wait, _ := s.take(len(ur.Body)/4 + 4); wait == 0 {
			s.inflight.Add(1)
			defer s.inflight.Add(-1)
			return v.ask(ctx, s.backend, ur)
		}
	}
	return 0, err
}

// ask sends the judge request to one backend and reads the verdict.
func (v *verifier) ask(ctx context.Context, be adapters.Backend, ur *adapters.UpstreamRequest) (cache.Verdict, error) {
	resp, err := be.Send(ctx, ur)
	if err != nil {
		return 0, err
	}
	defer resp.Close()
	if resp.Status != 200 {
		return 0, fmt.Errorf("judge answered HTTP %d", resp.Status)
	}
	a, err := adapters.ParseAnswer(adapters.EndpointChat, resp.Body)
	if err != nil {
		return 0, fmt.Errorf("judge answer: %w", err)
	}
	return cache.ParseVerdict(a.Content), nil
}

// status is /status's cache.verify; nil without a judge.
func (v *verifier) status() *admin.VerifyStatus {
	if v == nil {
		return nil
	}
	st := &admin.VerifyStatus{JudgeModel: v.cfg.JudgeModel, AuditRate: v.cfg.AuditRate, FalseHitRate: v.evid.Rate(),
		Scopes: v.evid.Scopes(), State: "ok", Calls: v.calls.Load(), Failures: v.failures.Load(),
		Queued: len(v.queue), DroppedAudits: v.dropped.Get()}
	if t := v.lastFail.Load(); t != 0 && time.Since(time.Unix(0, t)) < 30*time.Second {
		st.State = "failing"
	}
	if p := v.lastErr.Load(); p != nil {
		st.LastError = *p
	}
	return st
}
