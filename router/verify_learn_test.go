package router

import (
	"math"
	"testing"

	"frontdoor/cache"
)

// The threshold climbs a step at a time from where it starts to the lowest
// value whose judged evidence keeps the false rate under the target.
func TestThresholdFollowsEvidence(t *testing.T) {
	c := cache.DefaultVerifyConfig()
	c.TargetFalseHitRate = 0.02
	e := &evidence{threshold: 0.75}
	for i := range 200 {
		e.sims, e.wrong = append(e.sims, 0.8), append(e.wrong, i%5 == 0) // 20% wrong at 0.80
		e.sims, e.wrong = append(e.sims, 0.95), append(e.wrong, false)   // none wrong at 0.95
	}
	var path []float64
	for range 20 {
		e.threshold = e.step(c)
		path = append(path, e.threshold)
	}
	if math.Abs(path[0]-0.76) > 1e-9 {
		t.Fatalf("first step to %v, want 0.76 (one step)", path[0])
	}
	if got := path[len(path)-1]; math.Abs(got-0.805) > 1e-9 {
		t.Fatalf("settled at %v, want 0.805: the lowest value above the wrong ones with enough evidence (path %v)", got, path)
	}

	// Without enough evidence it does not move; with evidence of wrong
	// hits at the threshold and nowhere safe, it rises.
	few := &evidence{threshold: 0.9, sims: []float32{0.95, 0.95}, wrong: []bool{true, true}}
	if got := few.step(c); got != 0.9 {
		t.Fatalf("moved to %v on two samples", got)
	}
	bad := &evidence{threshold: 0.9}
	for range 50 {
		bad.sims, bad.wrong = append(bad.sims, 0.999), append(bad.wrong, true)
	}
	if got := bad.step(c); math.Abs(got-0.91) > 1e-9 {
		t.Fatalf("with every hit wrong the threshold went to %v, want up a step to 0.91", got)
	}
}
