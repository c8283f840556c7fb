package reuse

import (
	"context"
	"errors"
	"log/slog"
	"math"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"frontdoor/admission"
	"frontdoor/cache"
	"frontdoor/internal/telemetry"
	"frontdoor/router/admin"
)

// audit is a semantic candidate waiting for the judge: a served hit, or a
// near-miss (nearMiss set) that went upstream.
type audit struct {
	tenant, model string
	cached, asked string
	entry         string
	similarity    float32
	nearMiss      bool
	promote       *promotion // a near-miss on a curated entry: stored with its answer when approved
}

// verifier re-checks a share of the semantic hits, and the near-misses,
// with the judge model, off the request path: they are queued (a full
// queue drops them), workers take them under max_judge_rps and ask the
// judge through a JudgeSender (the gateway: the pool and, when allowed,
// spill-over), never through a tenant's quota. The verdicts on hits
// estimate the false-hit rate (cache.FalseHits); all verdicts are the
// evidence that moves thresholds (cache.Evidence) and that keeps an entry
// judged wrong from serving again.
// With the cache in Redis, the evidence, thresholds and entries judged
// wrong are shared by the replicas (sharedEvidence).
type verifier struct {
	verifierDeps
	cfg   cache.VerifyConfig
	queue chan audit
	rate  *admission.Bucket
	evid  cache.FalseHits
	log   *telemetry.RateLog
	verifyMetrics

	limits *cache.PromoteLimits // each tenant's promotions

	shared *cache.SharedEvidence // nil: this replica learns alone

	learner *cache.Learner // the evidence, the thresholds it moved, the entries judged wrong

	calls, failures atomic.Int64
	lastErr         atomic.Pointer[string]
	lastFail        atomic.Int64 // unix ns
}

// verifierDeps is what the verifier uses of the gateway, each as narrow
// as it needs.
type verifierDeps struct {
	judge   JudgeSender       // asks the judge model
	entries cache.EntryGetter // reads a curated entry; nil: near-misses are never promoted
	writes  entryWriter       // stores promotions
	// configured is the semantic threshold configured for tenant and
	// model (with the tenant's override), before the evidence moves it.
	configured func(tenant, model string) float64
	logger     *slog.Logger  // plain lines; log is the rate-limited WARNs
	entryTTL   time.Duration // the longest an entry lives: the promotion limits' window
}

// entryWriter stores cache entries off the request path (cache.Backend).
type entryWriter interface {
	Enqueue(w cache.Write, done func(error))
}

var _ entryWriter = (*cache.Backend)(nil)

// judgeWorkers is how many judge calls may be in flight at once.
const judgeWorkers = 4

func newVerifier(d verifierDeps, cfg cache.VerifyConfig, set *metrics.Set, shared *cache.SharedEvidence) *verifier {
	v := &verifier{verifierDeps: d, cfg: cfg, queue: make(chan audit, cfg.Queue),
		rate:    admission.NewBucket(cfg.MaxJudgeRPS, max(1, cfg.MaxJudgeRPS)),
		log:     telemetry.NewRateLog(d.logger, 10*time.Second),
		learner: cache.NewLearner(cfg), shared: shared}
	v.verifyMetrics = newVerifyMetrics(set, func() float64 { return v.evid.Rate().Estimate })
	v.limits = cache.NewPromoteLimits(cfg, d.entryTTL, shared)
	return v
}

// hit offers a served semantic hit for audit; it never blocks.
func (v *verifier) hit(a audit) {
	if v == nil || rand.Float64() >= v.cfg.AuditRate {
		return
	}
	v.offer(a)
}

// nearMiss offers a miss's best candidate within grey_zone below the
// threshold to the judge; it never blocks.
func (v *verifier) nearMiss(a audit) {
	if v == nil {
		return
	}
	a.nearMiss = true
	v.offer(a)
}

// offer queues a for the judge, or drops and counts it when the queue is
// full. Near-misses come with every miss close to the threshold and may
// well outrun max_judge_rps on a busy gateway: their drops are counted
// only; a dropped audit of a served hit is also a WARN.
func (v *verifier) offer(a audit) {
	select {
	case v.queue <- a:
	default:
		v.dropped.Inc()
		if !a.nearMiss {
			v.log.Warn("verify-dropped", "cache verify: the judge queue is full; audits are dropped", "queue", v.cfg.Queue)
		}
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
	kind := "audit"
	if a.nearMiss {
		kind = "near_miss"
	}
	jctx, cancel := context.WithTimeout(ctx, v.cfg.JudgeTimeout.D())
	vd, err := v.ask(jctx, a.cached, a.asked)
	cancel()
	if err != nil {
		if ctx.Err() != nil {
			return
		}
		v.failures.Add(1)
		v.lastFail.Store(time.Now().UnixNano())
		msg := err.Error()
		v.lastErr.Store(&msg)
		v.verdict[[2]string{kind, "error"}].Inc()
		v.log.Warn("verify-judge-failed", "cache verify: the judge failed; the audit is lost", "judge_model", v.cfg.JudgeModel, "error", msg)
		return
	}
	v.verdict[[2]string{kind, vd.String()}].Inc()
	// Learned first: learn may wait for Redis, and /status should not
	// show the verdict in the false-hit rate before the local evidence
	// (its thresholds) has it.
	v.learn(a, vd)
	if !a.nearMiss {
		v.evid.Add(a.tenant, a.model, vd) // the false-hit rate is of served hits
	}
	if vd == cache.VerdictYes && a.promote != nil {
		v.approve(ctx, a.promote, a.tenant, a.entry)
	}
	if vd == cache.VerdictNo {
		v.logger.Debug("cache verify: a semantic hit was judged wrong", "entry", a.entry, "tenant", a.tenant,
			"model", a.model, "similarity", a.similarity)
	}
	if t := v.cfg.TargetFalseHitRate; t > 0 {
		// The upper bound: the rate may be over the target. Not before
		// minEvidence judged hits, when any interval is wide.
		if r := v.evid.Rate(); r.Samples >= cache.MinEvidence && r.Upper > t {
			v.log.Warn("verify-over-target", "cache verify: semantic hits are wrong more often than the target",
				"false_hit_rate", r.String(), "target", t)
		}
	}
}

// ask asks the judge model whether the answer to cachedQ serves askedQ.
func (v *verifier) ask(ctx context.Context, cachedQ, askedQ string) (cache.Verdict, error) {
	v.calls.Add(1)
	a, err := v.judge.SendJudge(ctx, v.cfg.JudgeModel, func(model string) []byte {
		return cache.JudgeRequest(model, cachedQ, askedQ)
	})
	if err != nil {
		return 0, err
	}
	return cache.ParseVerdict(a.Content), nil
}

// status is /status's cache.verify; nil without a judge.
func (v *verifier) status() *admin.VerifyStatus {
	if v == nil {
		return nil
	}
	st := &admin.VerifyStatus{JudgeModel: v.cfg.JudgeModel, AuditRate: v.cfg.AuditRate, FalseHitRate: v.evid.Rate(),
		Unsure: v.verdict[[2]string{"audit", cache.VerdictUnsure.String()}].Get(),
		Scopes: v.evid.Scopes(), State: "ok", Calls: v.calls.Load(), Failures: v.failures.Load(),
		Queued: len(v.queue), DroppedAudits: v.dropped.Get(), Promoted: v.promoted.Get(), Thresholds: v.thresholds()}
	for reason, c := range v.promoteRefused {
		if n := c.Get(); n > 0 {
			if st.PromoteRefused == nil {
				st.PromoteRefused = map[string]uint64{}
			}
			st.PromoteRefused[reason] = n
		}
	}
	if t := v.lastFail.Load(); t != 0 && time.Since(time.Unix(0, t)) < 30*time.Second {
		st.State = "failing"
	}
	if p := v.lastErr.Load(); p != nil {
		st.LastError = *p
	}
	return st
}

// greyZone is how far below the threshold a candidate is judged; 0 without
// a judge.
func (v *verifier) greyZone() float32 {
	if v == nil {
		return 0
	}
	return float32(v.cfg.GreyZone)
}

// refused reports whether entry was judged wrong for a question at
// similarity sim or closer (cache.Learner.Refused).
func (v *verifier) refused(entry string, sim float32) bool {
	return v != nil && v.learner.Refused(entry, sim)
}

// threshold is the semantic threshold of tenant and model: configured
// until the evidence has moved it.
func (v *verifier) threshold(tenant, model string, configured float64) float64 {
	if v == nil {
		return configured
	}
	return v.learner.Threshold(tenant, model, configured)
}

// learn records a verdict as evidence, remembers an entry judged wrong,
// and moves the scope's threshold; with Redis, with the other replicas.
func (v *verifier) learn(a audit, vd cache.Verdict) {
	if vd == cache.VerdictUnsure {
		return
	}
	wrong := vd == cache.VerdictNo
	var shared *cache.Shared
	if v.shared != nil {
		var err error
		if shared, err = v.shared.Record(context.Background(), a.tenant, a.model, a.entry, a.similarity, wrong); err != nil {
			v.sharedErrs.Inc()
			v.log.Warn("verify-shared", msgSharedDown, "error", err.Error())
		}
	}
	from, to, set := v.learner.Learn(a.tenant, a.model, a.entry, a.similarity, wrong,
		v.configured(a.tenant, a.model), shared)
	if !set {
		return
	}
	if to != from {
		v.logger.Info("cache verify: semantic threshold moved", "tenant", a.tenant, "model", a.model,
			"from", round3(from), "to", round3(to))
		v.evid.Moved(a.tenant, a.model)
	}
	if shared != nil && (to != from || !shared.HasThreshold) {
		if err := v.shared.SetThreshold(context.Background(), a.tenant, a.model, to); err != nil {
			v.sharedErrs.Inc()
			v.log.Warn("verify-shared", msgSharedDown, "error", err.Error())
		}
	}
}

// verifySyncEvery is how often a replica reads the shared thresholds and
// entries judged wrong.
const verifySyncEvery = time.Second

const msgSharedDown = "cache verify: the shared evidence in Redis is unavailable; this replica learns alone"

// sync reads the shared thresholds and entries judged wrong every
// verifySyncEvery until ctx ends.
func (v *verifier) sync(ctx context.Context) {
	t := time.NewTicker(verifySyncEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		thr, wrong, err := v.shared.Load(ctx)
		if err != nil {
			if ctx.Err() != nil {
				continue
			}
			v.sharedErrs.Inc()
			v.log.Warn("verify-shared", msgSharedDown, "error", err.Error())
			if !errors.Is(err, cache.ErrTooManyWrong) {
				continue
			}
		}
		v.learner.Merge(thr, wrong)
	}
}

func round3(f float64) float64 { return math.Round(f*1000) / 1000 }

// thresholds lists the scopes' thresholds for /status.
func (v *verifier) thresholds() []admin.VerifyThreshold {
	var out []admin.VerifyThreshold
	for _, t := range v.learner.Thresholds() {
		out = append(out, admin.VerifyThreshold(t))
	}
	return out
}
