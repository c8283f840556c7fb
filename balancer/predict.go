package balancer

import (
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"
)

// The TTFT predictor: per node, a linear model of the time to the first
// token, learned online by recursive least squares with forgetting from
// the TTFT of the streamed answers the node gave. See doc.go.

// predictFeatures is the model's size: intercept, waiting, running, KV
// usage, uncached prompt tokens (thousands).
const predictFeatures = 5

// PredictMinObservations is how many observations a node's model needs
// before its predictions are known.
const PredictMinObservations = 20

const (
	// predictLambda is the forgetting factor: an observation's weight
	// halves after about 70 newer ones, so the model follows a node whose
	// speed changes (another model loaded, a neighbour on the GPU).
	predictLambda = 0.99
	// predictP0 is the initial covariance (× identity): a vague prior, so
	// the first observations decide.
	predictP0 = 1e4
	// predictMaxTrace bounds the covariance: in a direction the features
	// never move in (a KV usage that stays unknown), forgetting would grow
	// it without bound ("windup"); past this trace the update forgets
	// nothing.
	predictMaxTrace = 1e6
	// predictTokenScale puts prompt tokens in thousands, so that every
	// feature is of order 1..100 and the covariance stays well scaled.
	predictTokenScale = 1e-3
	// predictErrAlpha weighs a new absolute error in the mean shown by
	// /admin/nodes.
	predictErrAlpha = 0.05
)

// Prediction is a node's predicted TTFT for one request, with the features
// it was made from (kept to learn from the measured TTFT).
type Prediction struct {
	// Seconds is the predicted time to the first token, >= 0.
	Seconds float64
	// Known is false until the node's model has PredictMinObservations
	// observations; an unknown prediction must not drive decisions.
	Known bool
	x     [predictFeatures]float64
	node  *Node // the node it is for; nil: no prediction
}

// ttftModel is one node's predictor. mu guards the fields before last.
type ttftModel struct {
	mu      sync.Mutex
	w       [predictFeatures]float64
	p       [predictFeatures][predictFeatures]float64
	obs     int           // observations learned from
	lastAt  int64         // pool clock of the last observation
	absErr  float64       // EWMA of |predicted − measured| over known predictions
	errObs  int           // known predictions scored
	started bool          // p initialised
	resets  int           // times the model was numerically lost and started again
	last    atomic.Uint64 // float64 bits of the last prediction
	hasLast atomic.Bool   // a prediction was made
	lastOK  atomic.Bool   // the last prediction was known
}

func (m *ttftModel) initLocked() {
	if m.started {
		return
	}
	for i := range m.p {
		m.p[i][i] = predictP0
	}
	m.started = true
}

// features returns the request's features on node n now: 1, the engine's
// waiting and running requests (the last fresh scrape corrected by the
// change in this gateway's in-flight count since, as for the queue score;
// without one, our in-flight count runs), KV usage (unknown: 0.5) and the
// prompt tokens the node likely does not hold, in thousands.
func (p *Pool) features(n *Node, h Hints, now int64) [predictFeatures]float64 {
	inflight := n.inflight.Load()
	waiting, running, kv := 0.0, float64(inflight), 0.5
	if m := p.fresh(n, now); m != nil {
		if !math.IsNaN(m.waiting) && !math.IsNaN(m.running) {
			slots := float64(n.cfg.MaxConcurrency)
			if ls := math.Float64frombits(n.slots.Load()); ls > 0 && ls < slots {
				slots = ls
			}
			d := float64(inflight - m.inflight)
			total := max(float64(inflight), m.running+m.waiting+d)
			if m.waiting > 0 {
				waiting = max(0, m.waiting+d)
			} else {
				waiting = max(0, total-slots)
			}
			running = max(0, total-waiting)
		}
		if !math.IsNaN(m.kv) {
			kv = m.kv
		}
	}
	tokens := float64(h.PromptTokens)
	if h.Prefix != nil {
		tokens = float64(h.Prefix.tokens)
		if p.conf().Weights.Prefix > 0 {
			held := n.prefix.match(h.Prefix.blocks, p.capacityTokens(n))
			tokens = max(0, tokens-float64(held))
		}
	}
	return [predictFeatures]float64{1, waiting, running, kv, tokens * predictTokenScale}
}

// PredictTTFT predicts the time to the first token of a request with hints
// h on node n, now. Call it before the node's slot is taken and before
// Routed (which would count the prompt as held). The prediction is Known
// once the node's model has PredictMinObservations observations; it is
// never negative. It costs a prefix lookup and a dot product, and takes
// the node's predictor lock briefly.
func (p *Pool) PredictTTFT(n *Node, h Hints) Prediction {
	now := p.nowNanos()
	pr := Prediction{x: p.features(n, h, now), node: n}
	m := &n.pred
	m.mu.Lock()
	var y float64
	for i, v := range pr.x {
		y += m.w[i] * v
	}
	pr.Known = p.knownLocked(m, now)
	m.mu.Unlock()
	pr.Seconds = max(0, y)
	if math.IsNaN(pr.Seconds) || math.IsInf(pr.Seconds, 0) {
		pr.Seconds, pr.Known = 0, false
	}
	m.last.Store(math.Float64bits(pr.Seconds))
	m.lastOK.Store(pr.Known)
	m.hasLast.Store(true)
	return pr
}

// knownLocked reports whether m's predictions count: enough observations,
// the last within latencyStaleFactor × stale_after (as for the TTFT
// average). A node avoided because of its predictions is thus tried again
// after a while, and re-measured, instead of being judged forever on
// what it was.
func (p *Pool) knownLocked(m *ttftModel, now int64) bool {
	return m.obs >= PredictMinObservations && now-m.lastAt <= latencyStaleFactor*int64(p.conf().StaleAfter)
}

// ObserveTTFT teaches n's model the measured TTFT of the request pred was
// made for (a streamed answer's first token), and records the prediction's
// error when it was known. A zero Prediction, one made for another node,
// or a measured time <= 0 is ignored.
func (p *Pool) ObserveTTFT(n *Node, pred Prediction, measured time.Duration) {
	if pred.node != n || n == nil || measured <= 0 {
		return
	}
	y := measured.Seconds()
	m := &n.pred
	m.mu.Lock()
	m.initLocked()
	x := &pred.x
	// Recursive least squares with forgetting factor λ:
	//   k = P x ÷ (λ + xᵀ P x),  w += k (y − wᵀ x),  P = (P − k xᵀ P) ÷ λ.
	var px [predictFeatures]float64
	var denom, yhat float64
	for i := range px {
		for j := range x {
			px[i] += m.p[i][j] * x[j]
		}
		denom += x[i] * px[i]
		yhat += m.w[i] * x[i]
	}
	lambda := predictLambda
	var trace float64
	for i := range m.p {
		trace += m.p[i][i]
	}
	if trace > predictMaxTrace {
		lambda = 1
	}
	denom += lambda
	e := y - yhat
	for i := range m.w {
		m.w[i] += px[i] / denom * e
	}
	// P is symmetric, so xᵀP = (Px)ᵀ.
	for i := range m.p {
		for j := i; j < predictFeatures; j++ {
			v := (m.p[i][j] - px[i]*px[j]/denom) / lambda
			m.p[i][j], m.p[j][i] = v, v
		}
	}
	m.obs++
	m.lastAt = p.nowNanos()
	lost := false
	if !finite(m.w[:]) || !finite(m.p[0][:]) || !finite(m.p[1][:]) || !finite(m.p[2][:]) || !finite(m.p[3][:]) || !finite(m.p[4][:]) {
		// Numerically lost (it should not happen with the trace bound):
		// start again, unknown, rather than predict garbage.
		m.w, m.p = [predictFeatures]float64{}, [predictFeatures][predictFeatures]float64{}
		m.obs, m.errObs, m.absErr, m.started = 0, 0, 0, false
		m.resets++
		m.initLocked()
		lost = true
	}
	var absErr float64
	if pred.Known {
		absErr = math.Abs(pred.Seconds - y)
		if m.errObs == 0 {
			m.absErr = absErr
		} else {
			m.absErr += predictErrAlpha * (absErr - m.absErr)
		}
		m.errObs++
	}
	m.mu.Unlock()
	if lost {
		p.log.Warn("TTFT predictor lost numerically (a NaN or infinite weight); it starts again, unknown until it has observations", "node", n.cfg.Name)
	}
	if pred.Known {
		if h := p.predErr.Load(); h != nil {
			h.Update(absErr)
		}
	}
}

// PredictorStatus is a node's TTFT predictor as the admin API shows it.
type PredictorStatus struct {
	Observations int  `json:"observations"`
	Known        bool `json:"known"` // enough observations, the last recent enough, for its predictions to count
	// LastSeconds is the last prediction made for the node (null: none
	// yet); LastKnown says whether it was known.
	LastSeconds *float64 `json:"last_seconds"`
	LastKnown   bool     `json:"last_known"`
	// MeanAbsErrorSeconds is a moving mean (α 0.05) of |predicted −
	// measured| over known predictions; null before the first.
	MeanAbsErrorSeconds *float64 `json:"mean_abs_error_seconds"`
	// Coefficients are the model's weights: seconds, and seconds per
	// waiting request, per running request, per unit of KV usage and per
	// 1000 uncached prompt tokens.
	Coefficients PredictorCoefficients `json:"coefficients"`
	// Resets counts the times the model went numerically wrong (a NaN or
	// infinite weight) and started again from nothing.
	Resets int `json:"resets"`
}

// PredictorCoefficients are the TTFT model's weights.
type PredictorCoefficients struct {
	Intercept        float64 `json:"intercept"`
	Waiting          float64 `json:"waiting"`
	Running          float64 `json:"running"`
	KVUsage          float64 `json:"kv_usage"`
	KiloPromptTokens float64 `json:"kilo_prompt_tokens"`
}

// predictorStatus returns the predictor's state.
func (p *Pool) predictorStatus(n *Node, now int64) PredictorStatus {
	m := &n.pred
	m.mu.Lock()
	s := PredictorStatus{Observations: m.obs, Known: p.knownLocked(m, now),
		Coefficients: PredictorCoefficients{m.w[0], m.w[1], m.w[2], m.w[3], m.w[4]}, Resets: m.resets}
	if m.errObs > 0 {
		v := m.absErr
		s.MeanAbsErrorSeconds = &v
	}
	m.mu.Unlock()
	if m.hasLast.Load() {
		v := math.Float64frombits(m.last.Load())
		s.LastSeconds = &v
		s.LastKnown = m.lastOK.Load()
	}
	return s
}

func finite(v []float64) bool {
	for _, x := range v {
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return false
		}
	}
	return true
}

// predictedGauge is the value of frontdoor_node_predicted_ttft_seconds:
// the last prediction if it was known, else NaN.
func (n *Node) predictedGauge() float64 {
	if !n.pred.lastOK.Load() {
		return math.NaN()
	}
	return math.Float64frombits(n.pred.last.Load())
}

// predictionErrorBuckets are the upper bounds of
// frontdoor_ttft_prediction_error_seconds, 10 ms to 10 s.
var predictionErrorBuckets = []float64{0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}

func (p *Pool) registerPredictorLocked(set *metrics.Set) {
	p.predErr.Store(predictionErrorFamily.GetOrCreateHistogram(set, predictionErrorBuckets))
}
