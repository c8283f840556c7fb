// Package semeval runs the store-then-query protocol of the shared eval
// data against an embedder and the cache's guards: store every first
// sentence of a set of labelled pairs, query with every second one, and
// count true and false hits at each threshold. bench/semantic and
// "frontdoor calibrate" print its tables.
package semeval

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

// Pair is one labelled sentence pair: first is stored, second queries.
type Pair struct {
	First, Second string
	Same          bool // label 1: the two mean the same
}

// Dataset is a named list of pairs.
type Dataset struct {
	Name, Language string
	Pairs          []Pair
}

// LoadGPTCache reads GPTCache's mock_data.json: every pair is a paraphrase.
func LoadGPTCache(r io.Reader) ([]Pair, error) {
	var rows []struct {
		Origin  string `json:"origin"`
		Similar string `json:"similar"`
	}
	if err := json.NewDecoder(r).Decode(&rows); err != nil {
		return nil, fmt.Errorf("decode: %w", err)
	}
	pairs := make([]Pair, 0, len(rows))
	for i, row := range rows {
		if row.Origin == "" || row.Similar == "" {
			return nil, fmt.Errorf("row %d: empty origin or similar", i)
		}
		pairs = append(pairs, Pair{First: row.Origin, Second: row.Similar, Same: true})
	}
	return pairs, nil
}

// LoadTSV reads sentence1<TAB>sentence2<TAB>label lines.
func LoadTSV(r io.Reader) ([]Pair, error) {
	var pairs []Pair
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
		pairs = append(pairs, Pair{First: f[0], Second: f[1], Same: f[2] == "1"})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read: %w", err)
	}
	return pairs, nil
}

// Halves of a data set, for tuning on one and reporting the other.
const (
	HalfAll  = ""
	HalfEven = "even" // pairs 0, 2, 4, ... (in file order, blank lines skipped)
	HalfOdd  = "odd"  // pairs 1, 3, 5, ...
)

// Half returns the pairs of the given half: a deterministic split by
// position, so that a threshold or weight tuned on one half can be reported
// on the other.
func Half(pairs []Pair, half string) ([]Pair, error) {
	var start int
	switch half {
	case HalfAll:
		return pairs, nil
	case HalfEven:
	case HalfOdd:
		start = 1
	default:
		return nil, fmt.Errorf("half %q: want %q, %q or empty", half, HalfEven, HalfOdd)
	}
	out := make([]Pair, 0, len(pairs)/2+1)
	for i := start; i < len(pairs); i += 2 {
		out = append(out, pairs[i])
	}
	return out, nil
}

// LoadFile opens path and parses it with parse (LoadTSV or LoadGPTCache).
func LoadFile(path string, parse func(io.Reader) ([]Pair, error)) ([]Pair, error) {
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

// Result is the nearest stored entry for one query.
type Result struct {
	Same        bool    // the pair's label
	Sim         float32 // cosine to the nearest entry
	Partner     bool    // the nearest entry is the query's own first sentence
	GuardReason string  // "" if the guards allow the nearest entry
	// Exact: the query is a stored entry up to case, punctuation, spacing
	// and full-width forms: answering it is no semantic decision.
	Exact bool
	// Query and Entry are the two texts (Entry: the nearest stored one).
	Query, Entry string
}

// Evaluate stores the unique first sentences, queries with every second
// sentence and returns each query's nearest entry, with what the guards say
// of it.
func Evaluate(ctx context.Context, e embed.Embedder, guards cache.Guards, ds Dataset, workers int) ([]Result, error) {
	entryIndex := map[string]int{}
	canonicalEntries := map[string]bool{}
	var entries []string
	for _, p := range ds.Pairs {
		if _, ok := entryIndex[p.First]; !ok {
			entryIndex[p.First] = len(entries)
			entries = append(entries, p.First)
			canonicalEntries[Canonical(p.First)] = true
		}
	}
	queries := make([]string, len(ds.Pairs))
	for i, p := range ds.Pairs {
		queries[i] = p.Second
	}
	stored, err := embedAll(ctx, e, entries, workers)
	if err != nil {
		return nil, fmt.Errorf("embed entries: %w", err)
	}
	asked, err := embedAll(ctx, e, queries, workers)
	if err != nil {
		return nil, fmt.Errorf("embed queries: %w", err)
	}
	dims := e.Dims()
	results := make([]Result, len(queries))
	parallel(len(queries), runtime.GOMAXPROCS(0), func(qi int) {
		q := asked[qi*dims : (qi+1)*dims]
		best, bestSim := -1, float32(math.Inf(-1))
		for ei := range entries {
			if s := vek32.Dot(q, stored[ei*dims:(ei+1)*dims]); s > bestSim {
				best, bestSim = ei, s
			}
		}
		p := ds.Pairs[qi]
		_, reason := cache.GuardsAllow(guards, p.Second, entries[best])
		exact := canonicalEntries[Canonical(p.Second)]
		results[qi] = Result{
			Same:        p.Same,
			Sim:         bestSim,
			Partner:     best == entryIndex[p.First],
			GuardReason: reason,
			Exact:       exact,
			Query:       p.Second,
			Entry:       entries[best],
		}
	})
	return results, nil
}

// Canonical reduces s to its lower-cased letters and digits, full-width
// forms folded: texts equal in this form ask the same question.
func Canonical(s string) string {
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

// Score counts outcomes at one threshold.
type Score struct {
	Threshold            float32
	Queries, Paraphrases int // all scored queries; label-1 among them
	Exact                int // queries left out: the exact cache answers them
	TrueHits             int // label-1 query answered by its own partner
	FalseDifferent       int // label-0 query answered by its own partner
	// FalseOther counts queries answered by another pair's entry. The data
	// does not say whether that entry means the same (the shared sets
	// repeat questions across pairs), so these are reported apart, and
	// counted as false in FalseHits to stay on the safe side.
	FalseOther    int
	GuardRejected int // would have hit but a guard vetoed it
}

// FalseHits counts every false hit.
func (s Score) FalseHits() int { return s.FalseDifferent + s.FalseOther }

// ScoreAt counts outcomes at threshold. Unless keepExact, queries that equal
// a stored entry are left out (see Result.exact).
func ScoreAt(results []Result, threshold float32, guardsOn, keepExact bool) Score {
	s := Score{Threshold: threshold}
	for _, r := range results {
		if r.Exact && !keepExact {
			s.Exact++
			continue
		}
		s.Queries++
		if r.Same {
			s.Paraphrases++
		}
		if r.Sim < threshold {
			continue
		}
		if guardsOn && r.GuardReason != "" {
			s.GuardRejected++
			continue
		}
		switch {
		case !r.Partner:
			s.FalseOther++
		case r.Same:
			s.TrueHits++
		default:
			s.FalseDifferent++
		}
	}
	return s
}

// LowestSafeThreshold returns the lowest threshold whose false-hit rate over
// the scored queries is at most maxRate, and the Score there; ok is false if
// even the highest similarity seen leaves too many false hits.
func LowestSafeThreshold(results []Result, maxRate float64, guardsOn, keepExact bool) (s Score, ok bool) {
	sims := make([]float32, 0, len(results))
	for _, r := range results {
		sims = append(sims, r.Sim)
	}
	slices.Sort(sims)
	safe := func(t float32) (Score, bool) {
		s := ScoreAt(results, t, guardsOn, keepExact)
		return s, float64(s.FalseHits()) <= maxRate*float64(s.Queries)
	}
	// The false-hit count only falls as the threshold rises: binary search.
	i := sort.Search(len(sims), func(i int) bool {
		_, ok := safe(sims[i])
		return ok
	})
	if i == len(sims) {
		return Score{}, false
	}
	return safe(sims[i])
}

func Pct(n, d int) string {
	if d == 0 {
		return "–"
	}
	return fmt.Sprintf("%.1f%% (%d/%d)", 100*float64(n)/float64(d), n, d)
}

// WriteTable prints one markdown table of scores.
func WriteTable(w io.Writer, scores []Score, hasDifferent, guardsOn bool) {
	fmt.Fprint(w, "| threshold | paraphrase hit rate | false-hit rate (all queries) |")
	if hasDifferent {
		fmt.Fprint(w, " false hits on different-meaning pairs |")
	}
	fmt.Fprint(w, " answered by another pair's entry |")
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
		fmt.Fprintf(w, "| %.2f | %s | %s |", s.Threshold, Pct(s.TrueHits, s.Paraphrases), Pct(s.FalseHits(), s.Queries))
		if hasDifferent {
			fmt.Fprintf(w, " %s |", Pct(s.FalseDifferent, s.Queries-s.Paraphrases))
		}
		fmt.Fprintf(w, " %d |", s.FalseOther)
		if guardsOn {
			fmt.Fprintf(w, " %d |", s.GuardRejected)
		}
		fmt.Fprintln(w)
	}
}

// CalibrateOptions are the knobs of Calibrate.
type CalibrateOptions struct {
	From, To, Step float64 // the threshold sweep
	MaxFalse       float64 // the false-hit rate the suggested threshold keeps under
	Workers        int     // concurrent Embed calls
	KeepExact      bool    // also score queries equal to a stored entry
}

// Calibrate runs the store-then-query protocol on ds with e and the
// guards, prints the hit and false-hit rates at each threshold of the sweep
// as a markdown table, and the lowest threshold whose false-hit rate is at
// most opts.MaxFalse. It returns that threshold (ok false when none is).
func Calibrate(ctx context.Context, w io.Writer, e embed.Embedder, guards cache.Guards, ds Dataset, opts CalibrateOptions) (threshold float32, ok bool, err error) {
	if opts.Step <= 0 || opts.From > opts.To {
		return 0, false, fmt.Errorf("need a step > 0 and from <= to")
	}
	results, err := Evaluate(ctx, e, guards, ds, max(opts.Workers, 1))
	if err != nil {
		return 0, false, err
	}
	paraphrases := 0
	for _, p := range ds.Pairs {
		if p.Same {
			paraphrases++
		}
	}
	fmt.Fprintf(w, "%s: %d pairs (%d paraphrases, %d different meaning), embedder %s, guards %s\n",
		ds.Name, len(ds.Pairs), paraphrases, len(ds.Pairs)-paraphrases, e.Name(), GuardList(guards))
	if exact := ScoreAt(results, 0, false, false).Exact; exact > 0 && !opts.KeepExact {
		fmt.Fprintf(w, "%d queries equal a stored question up to case and punctuation: the exact cache answers them; left out.\n", exact)
	}
	fmt.Fprintln(w)
	var scores []Score
	for t := opts.From; t <= opts.To+1e-9; t += opts.Step {
		scores = append(scores, ScoreAt(results, float32(t), true, opts.KeepExact))
	}
	WriteTable(w, scores, paraphrases < len(ds.Pairs), true)
	fmt.Fprintln(w)
	safe, ok := LowestSafeThreshold(results, opts.MaxFalse, true, opts.KeepExact)
	if !ok {
		fmt.Fprintf(w, "No threshold keeps the false-hit rate at or below %.1f%%.\n", 100*opts.MaxFalse)
		return 0, false, nil
	}
	// Round up to the next 0.001 so that the printed value is safe too.
	t := float32(math.Ceil(float64(safe.Threshold)*1000) / 1000)
	safe = ScoreAt(results, t, true, opts.KeepExact)
	fmt.Fprintf(w, "Lowest threshold with false-hit rate ≤ %.1f%%: %.3f (paraphrase hit rate %s, false-hit rate %s).\n",
		100*opts.MaxFalse, t, Pct(safe.TrueHits, safe.Paraphrases), Pct(safe.FalseHits(), safe.Queries))
	fmt.Fprintf(w, "\n  cache:\n    semantic:\n      threshold: %.3f\n", t)
	return t, true, nil
}

// GuardList names the guards that are on, e.g. "numbers,negation".
func GuardList(g cache.Guards) string {
	var on []string
	for _, x := range []struct {
		on   bool
		name string
	}{{g.Numbers, cache.GuardNumbers}, {g.Negation, cache.GuardNegation}, {g.Entities, cache.GuardEntity}, {g.Order, cache.GuardOrder}} {
		if x.on {
			on = append(on, x.name)
		}
	}
	if len(on) == 0 {
		return "none"
	}
	return strings.Join(on, ",")
}
