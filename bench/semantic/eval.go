package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"unicode"

	"github.com/viterin/vek/vek32"

	"frontdoor/cache"
	"frontdoor/embed"
)

// pair is one labelled sentence pair: first is stored, second queries.
type pair struct {
	first, second string
	same          bool // label 1: the two mean the same
}

// dataset is a named list of pairs.
type dataset struct {
	name, language string
	pairs          []pair
}

// loadGPTCache reads GPTCache's mock_data.json: every pair is a paraphrase.
func loadGPTCache(r io.Reader) ([]pair, error) {
	var rows []struct {
		Origin  string `json:"origin"`
		Similar string `json:"similar"`
	}
	if err := json.NewDecoder(r).Decode(&rows); err != nil {
		return nil, fmt.Errorf("decode: %w", err)
	}
	pairs := make([]pair, 0, len(rows))
	for i, row := range rows {
		if row.Origin == "" || row.Similar == "" {
			return nil, fmt.Errorf("row %d: empty origin or similar", i)
		}
		pairs = append(pairs, pair{first: row.Origin, second: row.Similar, same: true})
	}
	return pairs, nil
}

// loadLCQMC reads sentence1<TAB>sentence2<TAB>label lines.
func loadLCQMC(r io.Reader) ([]pair, error) {
	var pairs []pair
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1<<20)
	for line := 1; sc.Scan(); line++ {
		text := strings.TrimRight(sc.Text(), "\r")
		if text == "" {
			continue
		}
		f := strings.Split(text, "\t")
		if len(f) != 3 || (f[2] != "0" && f[2] != "1") {
			return nil, fmt.Errorf("line %d: want sentence1<TAB>sentence2<TAB>0|1", line)
		}
		pairs = append(pairs, pair{first: f[0], second: f[1], same: f[2] == "1"})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read: %w", err)
	}
	return pairs, nil
}

func loadFile(path string, parse func(io.Reader) ([]pair, error)) ([]pair, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	pairs, err := parse(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return pairs, nil
}

// queryResult is the nearest stored entry for one query.
type queryResult struct {
	same        bool    // the pair's label
	sim         float32 // cosine to the nearest entry
	partner     bool    // the nearest entry is the query's own first sentence
	guardReason string  // "" if the default guards allow the nearest entry
	// exact: the query is a stored entry up to case, punctuation, spacing
	// and full-width forms: answering it is no semantic decision.
	exact bool
}

// evaluate stores the unique first sentences, queries with every second
// sentence and returns each query's nearest entry.
func evaluate(ctx context.Context, e embed.Embedder, ds dataset, workers int) ([]queryResult, error) {
	entryIndex := map[string]int{}
	canonicalEntries := map[string]bool{}
	var entries []string
	for _, p := range ds.pairs {
		if _, ok := entryIndex[p.first]; !ok {
			entryIndex[p.first] = len(entries)
			entries = append(entries, p.first)
			canonicalEntries[canonical(p.first)] = true
		}
	}
	queries := make([]string, len(ds.pairs))
	for i, p := range ds.pairs {
		queries[i] = p.second
	}
	stored, err := embedAll(ctx, e, entries, workers)
	if err != nil {
		return nil, fmt.Errorf("embed entries: %w", err)
	}
	asked, err := embedAll(ctx, e, queries, workers)
	if err != nil {
		return nil, fmt.Errorf("embed queries: %w", err)
	}
	guards := cache.DefaultGuards()
	dims := e.Dims()
	results := make([]queryResult, len(queries))
	parallel(len(queries), runtime.GOMAXPROCS(0), func(qi int) {
		q := asked[qi*dims : (qi+1)*dims]
		best, bestSim := -1, float32(math.Inf(-1))
		for ei := range entries {
			if s := vek32.Dot(q, stored[ei*dims:(ei+1)*dims]); s > bestSim {
				best, bestSim = ei, s
			}
		}
		p := ds.pairs[qi]
		_, reason := cache.GuardsAllow(guards, p.second, entries[best])
		exact := canonicalEntries[canonical(p.second)]
		results[qi] = queryResult{
			same:        p.same,
			sim:         bestSim,
			partner:     best == entryIndex[p.first],
			guardReason: reason,
			exact:       exact,
		}
	})
	return results, nil
}

// canonical reduces s to its lower-cased letters and digits, full-width
// forms folded: texts equal in this form ask the same question.
func canonical(s string) string {
	var b strings.Builder
	for _, r := range s {
		if r >= 0xFF01 && r <= 0xFF5E {
			r -= 0xFEE0
		}
		if unicode.IsLetter(r) || unicode.IsDigit(r) {
			b.WriteRune(unicode.ToLower(r))
		}
	}
	return b.String()
}

// embedAll embeds texts with the given concurrency into one flat matrix.
func embedAll(ctx context.Context, e embed.Embedder, texts []string, workers int) ([]float32, error) {
	dims := e.Dims()
	out := make([]float32, len(texts)*dims)
	var (
		mu       sync.Mutex
		firstErr error
	)
	parallel(len(texts), workers, func(i int) {
		v, err := e.Embed(ctx, texts[i])
		if err == nil && len(v) != dims {
			err = fmt.Errorf("got %d dims, want %d", len(v), dims)
		}
		if err != nil {
			mu.Lock()
			if firstErr == nil {
				firstErr = fmt.Errorf("text %d: %w", i, err)
			}
			mu.Unlock()
			return
		}
		copy(out[i*dims:], v)
	})
	return out, firstErr
}

// parallel calls fn(0..n-1) from the given number of goroutines.
func parallel(n, workers int, fn func(i int)) {
	workers = max(1, min(workers, n))
	var wg sync.WaitGroup
	next := make(chan int, workers)
	for range workers {
		wg.Go(func() {
			for i := range next {
				fn(i)
			}
		})
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
}

// score counts outcomes at one threshold.
type score struct {
	threshold            float32
	queries, paraphrases int // all scored queries; label-1 among them
	exact                int // queries left out: the exact cache answers them
	trueHits             int // label-1 query answered by its own partner
	falseDifferent       int // label-0 query answered by anything
	falseOther           int // label-1 query answered by another entry
	guardRejected        int // would have hit but a guard vetoed it
}

func (s score) falseHits() int { return s.falseDifferent + s.falseOther }

// scoreAt counts outcomes at threshold. Unless keepExact, queries that equal
// a stored entry are left out (see queryResult.exact).
func scoreAt(results []queryResult, threshold float32, guardsOn, keepExact bool) score {
	s := score{threshold: threshold}
	for _, r := range results {
		if r.exact && !keepExact {
			s.exact++
			continue
		}
		s.queries++
		if r.same {
			s.paraphrases++
		}
		if r.sim < threshold {
			continue
		}
		if guardsOn && r.guardReason != "" {
			s.guardRejected++
			continue
		}
		switch {
		case !r.same:
			s.falseDifferent++
		case r.partner:
			s.trueHits++
		default:
			s.falseOther++
		}
	}
	return s
}

// lowestSafeThreshold returns the lowest threshold whose false-hit rate over
// the scored queries is at most maxRate, and the score there; ok is false if
// even the highest similarity seen leaves too many false hits.
func lowestSafeThreshold(results []queryResult, maxRate float64, guardsOn, keepExact bool) (s score, ok bool) {
	sims := make([]float32, 0, len(results))
	for _, r := range results {
		sims = append(sims, r.sim)
	}
	slices.Sort(sims)
	safe := func(t float32) (score, bool) {
		s := scoreAt(results, t, guardsOn, keepExact)
		return s, float64(s.falseHits()) <= maxRate*float64(s.queries)
	}
	// The false-hit count only falls as the threshold rises: binary search.
	i := sort.Search(len(sims), func(i int) bool {
		_, ok := safe(sims[i])
		return ok
	})
	if i == len(sims) {
		return score{}, false
	}
	return safe(sims[i])
}

func pct(n, d int) string {
	if d == 0 {
		return "–"
	}
	return fmt.Sprintf("%.1f%% (%d/%d)", 100*float64(n)/float64(d), n, d)
}

// writeTable prints one markdown table of scores.
func writeTable(w io.Writer, scores []score, hasDifferent, guardsOn bool) {
	fmt.Fprint(w, "| threshold | paraphrase hit rate | false-hit rate (all queries) |")
	if hasDifferent {
		fmt.Fprint(w, " false hits on different-meaning pairs |")
	}
	fmt.Fprint(w, " false hits on another entry |")
	if guardsOn {
		fmt.Fprint(w, " vetoed by guards |")
	}
	fmt.Fprintln(w)
	fmt.Fprint(w, "|---|---|---|")
	if hasDifferent {
		fmt.Fprint(w, "---|")
	}
	fmt.Fprint(w, "---|")
	if guardsOn {
		fmt.Fprint(w, "---|")
	}
	fmt.Fprintln(w)
	for _, s := range scores {
		fmt.Fprintf(w, "| %.2f | %s | %s |", s.threshold, pct(s.trueHits, s.paraphrases), pct(s.falseHits(), s.queries))
		if hasDifferent {
			fmt.Fprintf(w, " %s |", pct(s.falseDifferent, s.queries-s.paraphrases))
		}
		fmt.Fprintf(w, " %d |", s.falseOther)
		if guardsOn {
			fmt.Fprintf(w, " %d |", s.guardRejected)
		}
		fmt.Fprintln(w)
	}
}
