package router

import (
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/valyala/fasthttp"

	"frontdoor/adapters"
	"frontdoor/admission"
	"frontdoor/internal/reply"
)

// spillover sends requests the local pool cannot take to a hosted API
// (DashScope's OpenAI-compatible mode, or any OpenAI-compatible service).
type spillover struct {
	name     string // "spillover:<kind>", the X-Upstream value
	backend  *adapters.DashScope
	onSat    bool
	onFail   bool
	rpm, tpm *admission.Bucket // the account's quota mirrored locally; nil = unlimited
	inflight *atomic.Int64     // the gateway's, kept across reloads
	spilled  atomic.Int64

	mu            sync.Mutex
	spillMetrics                   // its counters guarded by mu
	byReason      map[string]int64 // spilled requests by reason, for /status
	lastPredicted time.Time        // the last predicted_slo spill

	// responses: /v1/responses spills too; else such a request is not
	// spilled, and is counted in skipped
	responses bool
}

func newSpillover(cfg Config, set *metrics.Set, inflight *atomic.Int64) (*spillover, error) {
	sc := cfg.Spillover
	if !sc.Enabled {
		return nil, nil
	}
	base, err := sc.URL()
	if err != nil {
		return nil, fmt.Errorf("spillover.%w", err)
	}
	t := adapters.Target{Name: "spillover:" + sc.Kind, URL: base, Kind: adapters.Kind(sc.Kind), ResponsesURL: sc.ResponsesURL}
	if t.ResponsesURL == "" && sc.Kind == string(adapters.KindDashScope) {
		t.ResponsesURL = adapters.DashScopeResponsesURL(base)
	}
	if sc.APIKeyEnv != "" {
		t.APIKey = os.Getenv(sc.APIKeyEnv)
	}
	ac := UpstreamConfig(cfg)
	ac.MaxConns = 1024
	be, err := adapters.NewDashScope(t, ac, sc.ModelMap)
	if err != nil {
		return nil, fmt.Errorf("spillover: %w", err)
	}
	s := &spillover{name: t.Name, backend: be, byReason: map[string]int64{}, inflight: inflight,
		responses: sc.Responses, spillMetrics: newSpillMetrics(set, inflight)}
	for _, on := range sc.On {
		s.onSat = s.onSat || on == "saturated"
		s.onFail = s.onFail || on == "failed"
	}
	if sc.RPM > 0 {
		s.rpm = admission.NewBucket(float64(sc.RPM)/60, float64(sc.RPM))
	}
	if sc.TPM > 0 {
		s.tpm = admission.NewBucket(float64(sc.TPM)/60, float64(sc.TPM))
	}
	return s, nil
}

// count records one spilled request.
func (s *spillover) count(reason, model string) {
	s.mu.Lock()
	c := s.counter(reason, model)
	s.byReason[reason]++
	if reason == reasonPredicted {
		s.lastPredicted = time.Now()
	}
	s.mu.Unlock()
	c.Inc()
}

// reasons returns the spilled requests by reason and when the last
// predicted_slo spill happened (zero: never).
func (s *spillover) reasons() (map[string]int64, time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]int64, len(s.byReason))
	for r, v := range s.byReason {
		out[r] = v
	}
	return out, s.lastPredicted
}

// take charges one request of about tokens against the mirrored quota. It
// returns how long to wait when the quota is exhausted.
func (s *spillover) take(tokens int) (time.Duration, string) {
	if s.rpm != nil {
		if wait := s.rpm.Take(1); wait > 0 {
			return wait, "spillover_rpm"
		}
	}
	if s.tpm != nil {
		if wait := s.tpm.Take(float64(tokens)); wait > 0 {
			if s.rpm != nil {
				s.rpm.Refund(1)
			}
			return wait, "spillover_tpm"
		}
	}
	return 0, ""
}

// throttled empties the mirrored request bucket after the hosted API said
// we are over quota, so the next requests wait here instead of there.
func (s *spillover) throttled() {
	if s.rpm != nil {
		s.rpm.Drain()
	}
}

// reasonPredicted is the spill reason of a request the TTFT predictor
// expects every free local node to answer too late
// (spillover.max_predicted_ttft). It needs no entry in spillover.on:
// setting the limit asks for it.
const reasonPredicted = "predicted_slo"

// trySpill sends the request to the hosted API when the policy allows it,
// and reports whether that is the client's answer (the hosted answer, or
// an error of its own). A predicted_slo spill never answers with an error of
// its own: when the mirrored quota is out, or the hosted API fails or
// throttles, it reports false and the request goes to a local node.
func (u *upstream) trySpill(h *fasthttp.ResponseHeader, x *exchange, ur *adapters.UpstreamRequest, reason string) (reached, bool) {
	s := u.rt.Load().spill
	if !s.takes(x, reason) {
		return reached{}, false
	}
	soft := reason == reasonPredicted
	maxTokens := x.req.MaxTokens
	if maxTokens == 0 {
		maxTokens = u.conf().Admission.DefaultMaxTokens
	}
	if wait, limit := s.take(len(ur.Body)/4 + maxTokens); wait > 0 {
		if soft {
			return reached{}, false
		}
		return reached{err: reply.SpillQuota(limit, wait)}, true
	}
	resp, err := s.send(x, ur)
	if err != nil {
		u.badAnswer(x.id, s.name, err)
		if soft {
			u.log.Warn("predicted spill-over failed; trying local nodes", "request_id", x.id, "error", err.Error())
			return reached{}, false
		}
		return reached{err: sendError(s.name, err)}, true
	}
	if soft && (resp.Status == 429 || adapters.RetryableStatus(resp.Status)) {
		if resp.Status == 429 {
			s.throttled()
		}
		resp.Close()
		x.slot.release()
		return reached{}, false
	}
	x.upstream = s.name
	s.count(reason, x.model)
	s.spilled.Add(1)
	h.Set("X-Upstream-Model", resp.Model)
	if resp.Status == 429 {
		s.throttled()
		e := s.backend.MapError(resp.Status, resp.Body)
		e.RetryAfter = 1
		if ra, err := strconv.Atoi(string(resp.RetryAfter)); err == nil && ra > 0 {
			e.RetryAfter = ra
		}
		resp.Close()
		x.slot.release()
		h.SetCanonical(headerUpstream, []byte(s.name))
		return reached{err: e}, true
	}
	return reached{be: s.backend, resp: resp}, true
}

// takes reports whether the spill-over s (nil: off) may take x's request
// for reason: spillover.on names the reason (predicted_slo needs no
// entry), the tenant may leave (else x.spillRefused), and spill-over
// serves the endpoint (else x.spillSkipped, counted). The judge does not
// ask: cache.semantic.verify.spillover decides for it.
func (s *spillover) takes(x *exchange, reason string) bool {
	if s == nil || (reason == "saturated" && !s.onSat) || (reason == "failed" && !s.onFail) {
		return false
	}
	if !x.tenant.spillover {
		x.spillRefused = true
		return false
	}
	if x.endpoint == adapters.EndpointResponses && !s.responses {
		s.skipped.Inc() // spillover.responses: false
		x.spillSkipped = true
		return false
	}
	return true
}

// send sends ur to the hosted API, after its mirrored quota was charged
// (take), as one more attempt of x, which holds a spill-over slot until
// it releases x.slot; a failed send releases it. It counts nothing as
// spilled: a client's request is counted when its answer is passed on.
func (s *spillover) send(x *exchange, ur *adapters.UpstreamRequest) (*adapters.UpstreamResponse, error) {
	s.inflight.Add(1)
	x.slot.hold(nil, s.inflight)
	x.attempts++
	span := x.obs.Spillover(ur, s.name, x.attempts)
	resp, err := s.backend.Send(x.upstreamCtx(), ur)
	span.AttemptEnded(resp, err, time.Time{})
	if err != nil {
		x.slot.release()
	}
	return resp, err
}
