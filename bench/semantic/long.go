package main

import (
	"context"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"strings"

	"frontdoor/cache"
	"frontdoor/internal/semeval"
)

// longSamples is how many prompt pairs each row of the long-prompt table
// draws.
const longSamples = 2000

// reportLong measures how long prompts that differ in one sentence fall
// around the threshold: each pair shares n sentences drawn from the data
// set's first sentences and ends in a different one (two prompts asking
// different things after a common preamble). A cosine at or above the
// threshold, and one the guards also let through, is a false hit. The
// draws are seeded, so every run and every embedder sees the same pairs.
func reportLong(ctx context.Context, out io.Writer, ne namedEmbedder, guards cache.Guards, ds semeval.Dataset, shared []int, at float64) error {
	sents := make([]string, 0, len(ds.Pairs))
	for _, p := range ds.Pairs {
		sents = append(sents, p.First)
	}
	if len(sents) < 2 {
		return fmt.Errorf("%s: too few sentences", ds.Name)
	}
	sep := " "
	if ds.Language == "Chinese" {
		sep = ""
	}
	fmt.Fprintf(out, "\n## Long prompts from %s, embedder %s\n\n", ds.Name, ne.Name())
	fmt.Fprintf(out, "| shared sentences + 1 different | mean cosine | sd | ≥ %.2f | ≥ %.2f and the guards allow |\n", at, at)
	fmt.Fprintln(out, "|---|---|---|---|---|")
	for _, n := range shared {
		r := rand.New(rand.NewPCG(uint64(n), 18))
		var sum, sum2 float64
		over, served := 0, 0
		for range longSamples {
			common := make([]string, n, n+1)
			for j := range common {
				common[j] = sents[r.IntN(len(sents))]
			}
			i, k := r.IntN(len(sents)), r.IntN(len(sents)-1)
			if k >= i {
				k++ // two different last sentences
			}
			a := strings.Join(append(common, sents[i]), sep)
			b := strings.Join(append(common, sents[k]), sep)
			va, err := ne.Embed(ctx, a)
			if err != nil {
				return err
			}
			vb, err := ne.Embed(ctx, b)
			if err != nil {
				return err
			}
			var c float64
			for j := range va {
				c += float64(va[j]) * float64(vb[j])
			}
			sum, sum2 = sum+c, sum2+c*c
			if c >= at {
				over++
				if ok, _ := cache.GuardsAllow(guards, a, b); ok {
					served++
				}
			}
		}
		mean := sum / longSamples
		fmt.Fprintf(out, "| %d | %.3f | %.4f | %s | %s |\n", n, mean, math.Sqrt(max(sum2/longSamples-mean*mean, 0)),
			semeval.Pct(over, longSamples), semeval.Pct(served, longSamples))
	}
	return nil
}
