package balancer

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"
)

// trueTTFT is the hidden law the predictor must learn: seconds from the
// engine's waiting and running requests, KV usage and prompt tokens.
func trueTTFT(waiting, running, kv float64, tokens int) float64 {
	return 0.05 + 0.3*waiting + 0.02*running + 0.2*kv + 0.4*float64(tokens)/1000
}

// loadState puts node n in a random load state through a scrape, and
// returns it (running is 10, the node's cap, whenever requests wait).
func loadState(p *Pool, n *Node, rng *rand.Rand) (waiting, running, kv float64) {
	waiting = float64(rng.IntN(9))
	running = float64(rng.IntN(11))
	if waiting > 0 {
		running = 10
	}
	kv = rng.Float64()
	feed(p, n, vllmText(running, waiting, kv))
	return
}

// Observations drawn from a known linear law with noise: after enough of
// them, predictions on held-out states are within 10% of the law.
func TestPredictTTFTConverges(t *testing.T) {
	p, _ := newTestPool(t, nil, testNodes(1))
	n := p.Nodes()[0]
	rng := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 400; i++ {
		w, r, kv := loadState(p, n, rng)
		tokens := rng.IntN(8000)
		pred := p.PredictTTFT(n, Hints{PromptTokens: tokens})
		y := trueTTFT(w, r, kv, tokens) * (1 + 0.03*rng.NormFloat64())
		p.ObserveTTFT(n, pred, time.Duration(y*float64(time.Second)))
	}
	worst := 0.0
	for i := 0; i < 50; i++ {
		w, r, kv := loadState(p, n, rng)
		tokens := rng.IntN(8000)
		pred := p.PredictTTFT(n, Hints{PromptTokens: tokens})
		want := trueTTFT(w, r, kv, tokens)
		if !pred.Known {
			t.Fatal("a node with 400 observations predicts unknown")
		}
		rel := math.Abs(pred.Seconds-want) / want
		worst = max(worst, rel)
		if rel > 0.10 {
			t.Errorf("held-out point %d (waiting %v, running %v, kv %.2f, %d tokens): predicted %.3fs, law says %.3fs", i, w, r, kv, tokens, pred.Seconds, want)
		}
	}
	t.Logf("worst held-out relative error %.1f%%", 100*worst)
	st := p.predictorStatus(n, p.nowNanos())
	c := st.Coefficients
	t.Logf("coefficients %+v, mean abs error %v", c, *st.MeanAbsErrorSeconds)
	if math.Abs(c.Waiting-0.3) > 0.03 || math.Abs(c.KiloPromptTokens-0.4) > 0.04 {
		t.Errorf("coefficients %+v, want waiting 0.3 and kilo_prompt_tokens 0.4 (±10%%)", c)
	}
	if st.Observations != 400 || !st.Known || st.LastSeconds == nil || !st.LastKnown {
		t.Errorf("status %+v", st)
	}
}

// A node with fewer than PredictMinObservations observations predicts
// unknown; the 20th makes it known. Observations that cannot be learned
// from (another node's prediction, no prediction, no time) do not count.
func TestPredictTTFTUnknownUntilObserved(t *testing.T) {
	p, _ := newTestPool(t, nil, testNodes(2))
	a, b := p.Nodes()[0], p.Nodes()[1]
	set := metrics.NewSet()
	p.RegisterMetrics(set)
	rng := rand.New(rand.NewPCG(3, 4))
	for i := 0; i < PredictMinObservations-1; i++ {
		w, r, kv := loadState(p, a, rng)
		pred := p.PredictTTFT(a, Hints{PromptTokens: 500})
		if pred.Known {
			t.Fatalf("known after %d observations", i)
		}
		p.ObserveTTFT(a, pred, time.Duration(trueTTFT(w, r, kv, 500)*float64(time.Second)))
		p.ObserveTTFT(b, pred, time.Second)         // a's prediction: ignored on b
		p.ObserveTTFT(a, Prediction{}, time.Second) // no prediction: ignored
		p.ObserveTTFT(a, pred, 0)                   // no time: ignored
	}
	if pred := p.PredictTTFT(a, Hints{PromptTokens: 500}); pred.Known {
		t.Fatalf("known after %d observations", PredictMinObservations-1)
	}
	if got := p.predictorStatus(b, p.nowNanos()).Observations; got != 0 {
		t.Fatalf("b learned %d observations of a's predictions", got)
	}
	var sb strings.Builder
	set.WritePrometheus(&sb)
	if !strings.Contains(sb.String(), `frontdoor_node_predicted_ttft_seconds{node="a"} NaN`) {
		t.Fatalf("an unknown prediction must show as NaN:\n%s", sb.String())
	}
	w, r, kv := loadState(p, a, rng)
	pred := p.PredictTTFT(a, Hints{PromptTokens: 500})
	p.ObserveTTFT(a, pred, time.Duration(trueTTFT(w, r, kv, 500)*float64(time.Second)))
	pred = p.PredictTTFT(a, Hints{PromptTokens: 500})
	if !pred.Known || pred.Seconds < 0 {
		t.Fatalf("after %d observations: %+v", PredictMinObservations, pred)
	}
	p.ObserveTTFT(a, pred, time.Second)
	sb.Reset()
	set.WritePrometheus(&sb)
	for _, want := range []string{`frontdoor_ttft_prediction_error_seconds_count 1`, `frontdoor_node_predicted_ttft_seconds{node="a"} `} {
		if !strings.Contains(sb.String(), want) {
			t.Fatalf("no %q in:\n%s", want, sb.String())
		}
	}
	if strings.Contains(sb.String(), `frontdoor_node_predicted_ttft_seconds{node="a"} NaN`) {
		t.Fatal("a known prediction shows as NaN")
	}
}

// A model without an observation for 10 × stale_after is unknown again
// (the node gets traffic and is re-measured); one observation restores it.
func TestPredictTTFTForgetsWhenUnobserved(t *testing.T) {
	p, clk := newTestPool(t, nil, testNodes(1))
	a := p.Nodes()[0]
	for i := 0; i < PredictMinObservations; i++ {
		p.ObserveTTFT(a, p.PredictTTFT(a, Hints{PromptTokens: 100}), time.Second)
	}
	if !p.PredictTTFT(a, Hints{PromptTokens: 100}).Known {
		t.Fatal("unknown after enough observations")
	}
	clk.Advance(latencyStaleFactor*p.Config().StaleAfter.D() + time.Second)
	pred := p.PredictTTFT(a, Hints{PromptTokens: 100})
	if pred.Known {
		t.Fatal("still known without an observation for 10 × stale_after")
	}
	p.ObserveTTFT(a, pred, time.Second)
	if pred = p.PredictTTFT(a, Hints{PromptTokens: 100}); !pred.Known || math.Abs(pred.Seconds-1) > 0.05 {
		t.Fatalf("after a fresh observation: %+v, want known, about 1s", pred)
	}
}

// The token feature is the prompt the node does not hold: once a prompt's
// prefix was routed to a node, the same prompt is predicted faster there
// than on a node that never saw it.
func TestPredictTTFTCountsUncachedTokens(t *testing.T) {
	p, _ := newTestPool(t, nil, testNodes(2))
	a, b := p.Nodes()[0], p.Nodes()[1]
	rng := rand.New(rand.NewPCG(5, 6))
	for _, n := range []*Node{a, b} {
		for i := 0; i < 200; i++ {
			w, r, kv := loadState(p, n, rng)
			tokens := rng.IntN(8000)
			pred := p.PredictTTFT(n, Hints{PromptTokens: tokens})
			p.ObserveTTFT(n, pred, time.Duration(trueTTFT(w, r, kv, tokens)*float64(time.Second)))
		}
		feed(p, n, vllmText(2, 0, 0.3))
	}
	ph := p.PrefixHasher()
	ph.Message([]byte("user"))
	ph.Write([]byte(strings.Repeat("a long shared document ", 1000)))
	px := ph.Prefix()
	p.Routed(a, px)
	onA, onB := p.PredictTTFT(a, Hints{Prefix: px}), p.PredictTTFT(b, Hints{Prefix: px})
	if !onA.Known || !onB.Known || onA.Seconds >= onB.Seconds-0.5*0.4*float64(px.Tokens())/1000 {
		t.Fatalf("%d-token prompt held by a: predicted %.3fs on a, %.3fs on b", px.Tokens(), onA.Seconds, onB.Seconds)
	}
}

// A model that goes numerically wrong starts again, unknown, and says so
// in its status, instead of predicting NaN.
func TestPredictTTFTResetsWhenLost(t *testing.T) {
	p, _ := newTestPool(t, nil, testNodes(1))
	a := p.Nodes()[0]
	for i := 0; i < PredictMinObservations; i++ {
		p.ObserveTTFT(a, p.PredictTTFT(a, Hints{PromptTokens: 100}), time.Second)
	}
	pred := p.PredictTTFT(a, Hints{PromptTokens: 100})
	pred.x[4] = math.Inf(1)
	p.ObserveTTFT(a, pred, time.Second)
	st := p.predictorStatus(a, p.nowNanos())
	if st.Resets != 1 || st.Known || st.Observations != 0 {
		t.Fatalf("after a non-finite update: %+v", st)
	}
	if pred := p.PredictTTFT(a, Hints{PromptTokens: 100}); pred.Known || math.IsNaN(pred.Seconds) {
		t.Fatalf("prediction after the reset: %+v", pred)
	}
}

// Predicting and learning allocate nothing.
func TestPredictTTFTAllocatesNothing(t *testing.T) {
	p, _ := newTestPool(t, nil, testNodes(1))
	a := p.Nodes()[0]
	feed(p, a, vllmText(4, 2, 0.3))
	ph := p.PrefixHasher()
	ph.Message([]byte("user"))
	ph.Write([]byte(strings.Repeat("some prompt text ", 100)))
	h := Hints{Prefix: ph.Prefix()}
	p.Routed(a, h.Prefix)
	if n := testing.AllocsPerRun(200, func() { p.ObserveTTFT(a, p.PredictTTFT(a, h), 300*time.Millisecond) }); n != 0 {
		t.Fatalf("%v allocations a prediction and observation, want 0", n)
	}
}

func BenchmarkPredictAndObserveTTFT(b *testing.B) {
	p, _ := newTestPool(b, nil, testNodes(1))
	a := p.Nodes()[0]
	feed(p, a, vllmText(4, 2, 0.3))
	h := Hints{PromptTokens: 2000}
	b.ReportAllocs()
	for b.Loop() {
		p.ObserveTTFT(a, p.PredictTTFT(a, h), 300*time.Millisecond)
	}
}
