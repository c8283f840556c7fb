package router

import (
	"context"
	"errors"
	"log/slog"
	"runtime"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"frontdoor/adapters"
	"frontdoor/admission"
	"frontdoor/internal/telemetry"
)

// bodyRefusals counts and logs the request bodies refused because two
// readers could take them to mean different things (see
// adapters.ParseRequest): a duplicate key, invalid UTF-8 or a lone
// surrogate escape. Other JSON errors are only counted in
// frontdoor_requests_total.
//
// It is also the gate of every body's parse (adapters.ParseGate): the
// bodies parsed at once share limits.parse_budget_bytes (see parseOptions).
type bodyRefusals struct {
	bodyMetrics
	log    *telemetry.RateLog
	budget *admission.ByteBudget
	// collecting: a collection started by ReleaseParse runs.
	collecting atomic.Bool
}

func newBodyRefusals(set *metrics.Set, log *slog.Logger) *bodyRefusals {
	def := DefaultConfig().Limits
	b := &bodyRefusals{log: telemetry.NewRateLog(log, 10*time.Second),
		budget: admission.NewByteBudget(int64(def.ParseBudgetBytes), def.ParseWait.D())}
	b.bodyMetrics = newBodyMetrics(set, b.budget)
	return b
}

// parseOptions are the bounds and the gate of a request body's parse: the
// one point where every body (inference, embeddings, pass-through) meets
// limits.max_messages, max_content_parts, max_token_ids and the parse
// budget.
func (g *Gateway) parseOptions() adapters.ParseOptions {
	l := &g.conf().Limits
	g.bodies.budget.Set(int64(l.ParseBudgetBytes), l.ParseWait.D()) // a no-op unless a reload changed them
	return adapters.ParseOptions{
		Limits: adapters.BodyLimits{MaxMessages: l.MaxMessages, MaxContentParts: l.MaxContentParts, MaxTokenIDs: l.MaxTokenIDs},
		Gate:   g.bodies,
	}
}

// AcquireParse implements adapters.ParseGate: a body is parsed once its
// estimated cost fits the parse budget. A body that never fits is a 413;
// a budget that stays full for limits.parse_wait is a 503 with
// Retry-After, counted (frontdoor_parse_budget_refused_total) and logged.
func (b *bodyRefusals) AcquireParse(cost int64) *adapters.APIError {
	err := b.budget.Acquire(context.Background(), cost)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, admission.ErrOverBudget):
		return &adapters.APIError{Status: 413, Type: adapters.TypeInvalidRequest, Code: "request_too_complex",
			Message: "the request body would take about " + mib(cost) + " of memory to parse, more than limits.parse_budget_bytes (" +
				mib(b.budget.Capacity()) + ") allows: send fewer messages, inputs or token ids"}
	}
	st := b.budget.Status()
	b.log.Warn("body:parse-budget", "request body refused: the parse budget stayed full",
		"cost_bytes", cost, "in_use_bytes", st.InUseBytes, "capacity_bytes", st.CapacityBytes, "refused", st.Refused)
	return &adapters.APIError{Status: 503, Type: adapters.TypeUnavailable, Code: "parse_budget_full", RetryAfter: 1,
		Message: "the gateway is holding too many large request bodies at once (limits.parse_budget_bytes, " +
			mib(st.CapacityBytes) + "); retry after the Retry-After delay"}
}

// mib is n bytes in MiB, for a message.
func mib(n int64) string { return strconv.FormatFloat(float64(n)/(1<<20), 'f', 1, 64) + " MiB" }

// ReleaseParse implements adapters.ParseGate. A large parse's memory (its
// tree, the copies of its body) is collected at once rather than when the
// heap has doubled: with the default GOGC a few large bodies in a row would
// otherwise take twice their memory (bench/bodymem).
func (b *bodyRefusals) ReleaseParse(cost int64) {
	b.budget.Release(cost)
	if cost >= collectAfterCost && b.collecting.CompareAndSwap(false, true) {
		go func() {
			runtime.GC()
			b.collecting.Store(false)
		}()
	}
}

// collectAfterCost is the parse cost from which its release runs the
// garbage collector (see ReleaseParse): a body of a few MB.
const collectAfterCost = 8 << 20

// note counts e when it refused an ambiguous body.
func (b *bodyRefusals) note(x *exchange, e *adapters.APIError) {
	c := b.counts[e.Code]
	if c == nil {
		return
	}
	c.Inc()
	b.log.Warn("body:"+e.Code, "request body refused: two JSON readers could read it differently",
		"request_id", x.id, "tenant", x.tenant.name, "reason", e.Code, "error", e.Message)
}
