package cache

import (
	"math"
	"math/rand/v2"
	"testing"
)

func TestWilson(t *testing.T) {
	for _, c := range []struct {
		k, n         int64
		lower, upper float64
	}{
		{0, 10, 0, 0.2775},
		{5, 10, 0.2366, 0.7634},
		{1, 100, 0.0018, 0.0545},
		{10, 10, 0.7225, 1},
	} {
		got := Wilson(c.k, c.n)
		if math.Abs(got.Lower-c.lower) > 1e-4 || math.Abs(got.Upper-c.upper) > 1e-4 || got.Samples != c.n {
			t.Errorf("Wilson(%d, %d) = %+v, want [%.4f, %.4f]", c.k, c.n, got, c.lower, c.upper)
		}
	}
	if (Wilson(0, 0) != Interval{}) {
		t.Error("no samples must be all zero")
	}
}

// The interval holds the true rate about 95% of the time.
func TestWilsonCoverage(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	const trials, n, p = 2000, 200, 0.04
	held := 0
	for range trials {
		var k int64
		for range n {
			if r.Float64() < p {
				k++
			}
		}
		if i := Wilson(k, n); i.Lower <= p && p <= i.Upper {
			held++
		}
	}
	if share := float64(held) / trials; share < 0.92 || share > 0.99 {
		t.Fatalf("the interval held the true rate in %.1f%% of trials, want about 95%%", 100*share)
	}
}

func TestParseVerdict(t *testing.T) {
	for reply, want := range map[string]Verdict{
		"yes": VerdictYes, "Yes.": VerdictYes, " YES, it does": VerdictYes, "是": VerdictYes,
		"no": VerdictNo, "No!": VerdictNo, "no\nbecause": VerdictNo, "否。": VerdictNo,
		"<think>The cities differ.</think>\n\nno": VerdictNo, "<think>same</think> Yes": VerdictYes, "<think>yes": VerdictUnsure,
		"unsure": VerdictUnsure, "": VerdictUnsure, "maybe yes": VerdictUnsure, "yesno": VerdictUnsure,
	} {
		if got := ParseVerdict(reply); got != want {
			t.Errorf("ParseVerdict(%q) = %v, want %v", reply, got, want)
		}
	}
}

func TestFalseHits(t *testing.T) {
	var f FalseHits
	for range 9 {
		f.Add("acme", "m", VerdictYes)
	}
	f.Add("acme", "m", VerdictNo)
	f.Add("acme", "m", VerdictUnsure)
	f.Add("globex", "m", VerdictNo)
	if r := f.Rate(); r.Samples != 11 || math.Abs(r.Estimate-2.0/11) > 1e-9 {
		t.Fatalf("overall %+v, want 2 of 11", r)
	}
	f.Moved("acme", "m")
	f.Add("acme", "m", VerdictYes)
	for _, s := range f.Scopes() {
		switch s.Tenant {
		case "acme":
			if s.Samples != 11 || s.Unsure != 1 || math.Abs(s.Estimate-1.0/11) > 1e-9 || s.Current.Samples != 1 || s.Current.Estimate != 0 {
				t.Errorf("acme %+v", s)
			}
		case "globex":
			if s.Samples != 1 || s.Estimate != 1 {
				t.Errorf("globex %+v", s)
			}
		}
	}
}
