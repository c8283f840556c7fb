package cache

import (
	"math"
	"testing"
)

// The threshold climbs a step at a time from where it starts to the lowest
// value whose judged evidence keeps the false rate under the target.
func TestThresholdFollowsEvidence(t *testing.T) {
	c := DefaultVerifyConfig()
	c.TargetFalseHitRate = 0.02
	var e Evidence
	for i := range 200 {
		e.Add(0.8, i%5 == 0) // 20% wrong at 0.80
		e.Add(0.95, false)   // none wrong at 0.95
	}
	cur := 0.75
	var path []float64
	for range 20 {
		cur = e.NextThreshold(c, cur)
		path = append(path, cur)
	}
	if math.Abs(path[0]-0.76) > 1e-9 {
		t.Fatalf("first step to %v, want 0.76 (one step)", path[0])
	}
	if got := path[len(path)-1]; math.Abs(got-0.805) > 1e-9 {
		t.Fatalf("settled at %v, want 0.805: the lowest value above the wrong ones with enough evidence (path %v)", got, path)
	}

	// Without enough evidence it does not move; with evidence of wrong
	// hits at the threshold and nowhere safe, it rises.
	var few Evidence
	few.Add(0.95, true)
	few.Add(0.95, true)
	if got := few.NextThreshold(c, 0.9); got != 0.9 {
		t.Fatalf("moved to %v on two samples", got)
	}
	var bad Evidence
	for range 50 {
		bad.Add(0.999, true)
	}
	if got := bad.NextThreshold(c, 0.9); math.Abs(got-0.91) > 1e-9 {
		t.Fatalf("with every hit wrong the threshold went to %v, want up a step to 0.91", got)
	}

	// Clean evidence from 0.9 up says nothing below 0.9: the threshold
	// comes down to 0.9, not to min_threshold.
	var clean Evidence
	for range 400 {
		clean.Add(0.9, false)
	}
	cur = 0.95
	for range 20 {
		cur = clean.NextThreshold(c, cur)
	}
	if math.Abs(cur-0.9) > 1e-9 {
		t.Fatalf("settled at %v, want 0.9, the lowest judged similarity", cur)
	}
}
