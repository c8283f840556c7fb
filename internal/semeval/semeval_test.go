package semeval

import (
	"context"
	"errors"
	"strings"
	"testing"

	"frontdoor/cache"
)

// stubEmbedder returns fixed unit vectors, so that every similarity in a
// test is known.
type stubEmbedder map[string][]float32

func (s stubEmbedder) Embed(_ context.Context, text string) ([]float32, error) {
	v, ok := s[text]
	if !ok {
		return nil, errors.New("no vector for " + text)
	}
	return v, nil
}
func (s stubEmbedder) Dims() int    { return 2 }
func (s stubEmbedder) Name() string { return "stub" }

func TestEvaluateAndScore(t *testing.T) {
	// Similarities to the entries follow from the 2-d unit vectors.
	e := stubEmbedder{
		"sort a list":          {1, 0},
		"how to sort a list":   {0.96, 0.28}, // 0.96 to "sort a list"
		"what is 12*7":         {0, 1},
		"what is 12*8":         {0.28, 0.96}, // 0.96 to "what is 12*7": numbers veto
		"weather today":        {-1, 0},
		"tell me a joke":       {-0.6, -0.8}, // 0.6 to "weather today"
		"sort the list please": {0.8, 0.6},   // 0.8 to "sort a list", 0.6 to "what is 12*7"
		"Weather today?":       {-1, 0},      // same text as an entry up to case and punctuation
	}
	ds := Dataset{Name: "stub", Pairs: []Pair{
		{"sort a list", "how to sort a list", true},    // true hit at <= 0.96
		{"what is 12*7", "what is 12*8", false},        // false hit unless guards veto
		{"weather today", "tell me a joke", false},     // false hit at <= 0.6
		{"what is 12*7", "sort the list please", true}, // nearest is another entry: false hit
		{"sort a list", "Weather today?", false},       // left out: equals an entry
	}}
	results, err := Evaluate(context.Background(), e, cache.Guards{Numbers: true, Negation: true}, ds, 2)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		threshold                  float32
		guards                     bool
		trueHits, falseDiff, other int
		vetoed                     int
	}{
		{0.5, true, 1, 1, 1, 1},
		{0.5, false, 1, 2, 1, 0},
		{0.7, true, 1, 0, 1, 1},
		{0.9, true, 1, 0, 0, 1},
		{0.97, true, 0, 0, 0, 0},
	}
	for _, tc := range tests {
		s := ScoreAt(results, tc.threshold, tc.guards, false)
		if s.Queries != 4 || s.Paraphrases != 2 || s.Exact != 1 {
			t.Fatalf("queries/paraphrases/exact = %d/%d/%d, want 4/2/1", s.Queries, s.Paraphrases, s.Exact)
		}
		if s.TrueHits != tc.trueHits || s.FalseDifferent != tc.falseDiff || s.FalseOther != tc.other || s.GuardRejected != tc.vetoed {
			t.Errorf("t=%.2f guards=%v: true %d, false on different %d, false on other %d, vetoed %d; want %d %d %d %d",
				tc.threshold, tc.guards, s.TrueHits, s.FalseDifferent, s.FalseOther, s.GuardRejected,
				tc.trueHits, tc.falseDiff, tc.other, tc.vetoed)
		}
	}
	// With --keep-exact the equal-text query counts, as a false hit.
	if s := ScoreAt(results, 0.99, true, true); s.Queries != 5 || s.FalseOther != 1 {
		t.Errorf("keep-exact: queries %d, answered by another entry %d; want 5, 1", s.Queries, s.FalseOther)
	}
	// At most 25% false hits (1 of 4) needs a threshold above 0.6.
	safe, ok := LowestSafeThreshold(results, 0.25, true, false)
	if !ok || safe.Threshold <= 0.6 || safe.Threshold > 0.8 || safe.FalseHits() > 1 {
		t.Errorf("lowest safe threshold = %.3f (ok %v) with %d false hits, want in (0.6, 0.8] with <= 1",
			safe.Threshold, ok, safe.FalseHits())
	}
	// Scored with --keep-exact, the equal-text query is a false hit at
	// similarity 1, so no threshold gets false hits to zero.
	if s, ok := LowestSafeThreshold(results, 0, true, true); ok {
		t.Errorf("found threshold %.3f with no false hits, want none", s.Threshold)
	}
}

func TestLoaders(t *testing.T) {
	pairs, err := LoadTSV(strings.NewReader("甲\t乙\t1\r\n\n丙\t丁\t0\n"))
	if err != nil {
		t.Fatal(err)
	}
	if len(pairs) != 2 || pairs[0] != (Pair{"甲", "乙", true}) || pairs[1] != (Pair{"丙", "丁", false}) {
		t.Fatalf("LoadTSV = %+v", pairs)
	}
	if _, err := LoadTSV(strings.NewReader("only\ttwo\n")); err == nil {
		t.Error("LoadTSV accepted a line with two fields")
	}
	if _, err := LoadTSV(strings.NewReader("a\tb\t2\n")); err == nil {
		t.Error("LoadTSV accepted label 2")
	}

	pairs, err = LoadGPTCache(strings.NewReader(`[{"origin":"a","similar":"b"}]`))
	if err != nil || len(pairs) != 1 || pairs[0] != (Pair{"a", "b", true}) {
		t.Fatalf("LoadGPTCache = %+v, %v", pairs, err)
	}
	if _, err := LoadGPTCache(strings.NewReader(`[{"origin":"a"}]`)); err == nil {
		t.Error("LoadGPTCache accepted a row without similar")
	}
}

func TestCanonical(t *testing.T) {
	if Canonical("Weather, TODAY？") != Canonical("weather today") {
		t.Error("canonical should ignore case, punctuation and spacing")
	}
	if Canonical("ＡＢＣ") != "abc" {
		t.Errorf("Canonical(ＡＢＣ) = %q", Canonical("ＡＢＣ"))
	}
	if Canonical("12*7") == Canonical("12*8") {
		t.Error("canonical must keep digits")
	}
}

func TestHalf(t *testing.T) {
	pairs := []Pair{{"a", "b", true}, {"c", "d", false}, {"e", "f", true}}
	even, _ := Half(pairs, HalfEven)
	odd, _ := Half(pairs, HalfOdd)
	all, _ := Half(pairs, HalfAll)
	if len(even) != 2 || even[1].First != "e" || len(odd) != 1 || odd[0].First != "c" || len(all) != 3 {
		t.Errorf("Half: even %v, odd %v, all %v", even, odd, all)
	}
	if _, err := Half(pairs, "third"); err == nil {
		t.Error("Half accepted an unknown half")
	}
}
