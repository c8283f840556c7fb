// Command semantic measures how well an embedder plus the cache's false-hit
// guards separate paraphrases from different questions, following the
// protocol in the shared eval data's README: store every first sentence,
// query with every second one, take the nearest stored entry by cosine and
// count a hit when its similarity reaches the threshold and the guards allow
// it. It prints markdown tables for a sweep of thresholds.
//
//	go run ./bench/semantic [--data ../shared/eval] [--embedder-url URL --embedder-model M]
//
// The data is read from --data and never copied into the repository.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"frontdoor/cache"
	"frontdoor/embed"
	"frontdoor/internal/semeval"
	"frontdoor/internal/units"
)

func main() {
	if err := run(context.Background(), os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "semantic:", err)
		os.Exit(1)
	}
}

type options struct {
	data        string
	dims        int
	url         string
	model       string
	keyEnv      string
	urlDims     int
	concurrency int
	from, to    float64
	step        float64
	maxFalse    float64
	keepExact   bool
	half        string
	sets        string
	guards      string
	at          float64
	vetoes      int
	long        string
}

func run(ctx context.Context, args []string, out io.Writer) error {
	var o options
	fs := flag.NewFlagSet("semantic", flag.ContinueOnError)
	fs.StringVar(&o.data, "data", "../shared/eval", "directory holding gptcache_mock_data.json and lcqmc_dev.tsv")
	fs.IntVar(&o.dims, "dims", 512, "dimensions of the local embedder")
	fs.StringVar(&o.url, "embedder-url", "", "also evaluate an OpenAI-compatible embeddings endpoint at this base URL (e.g. http://127.0.0.1:8000/v1)")
	fs.StringVar(&o.model, "embedder-model", "", "model name for --embedder-url")
	fs.StringVar(&o.keyEnv, "embedder-key-env", "", "environment variable holding the bearer key for --embedder-url")
	fs.IntVar(&o.urlDims, "embedder-dims", 1024, "vector length the --embedder-url model returns")
	fs.IntVar(&o.concurrency, "concurrency", 64, "concurrent Embed calls for --embedder-url (the local embedder uses one per core)")
	fs.Float64Var(&o.from, "from", 0.80, "lowest threshold of the sweep")
	fs.Float64Var(&o.to, "to", 0.98, "highest threshold of the sweep")
	fs.Float64Var(&o.step, "step", 0.02, "threshold step")
	fs.Float64Var(&o.maxFalse, "max-false", 0.01, "false-hit rate the suggested threshold must not exceed")
	fs.BoolVar(&o.keepExact, "keep-exact", false, "also score queries that equal a stored entry up to case, punctuation and spacing")
	fs.StringVar(&o.half, "half", "", "score only this half (even|odd, by pair position) of the tuning sets pawsx_zh_valid.tsv and mrpc_val.tsv")
	fs.StringVar(&o.sets, "sets", "gptcache,lcqmc,pawsx,mrpc", "data sets to run, comma-separated")
	fs.StringVar(&o.guards, "guards", "numbers,negation,entity,order", "guards in the guards-on tables, comma-separated")
	fs.IntVar(&o.vetoes, "show-vetoes", 0, "print up to this many label-1 pairs at or above --at that each guard vetoed, and label-0 pairs served")
	fs.StringVar(&o.long, "long", "", "also measure long prompts: pairs that share this many sentences (comma-separated counts) and differ in a last one")
	fs.Float64Var(&o.at, "at", cache.DefaultConfig().Semantic.Threshold, "threshold of the summary table")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if o.step <= 0 || o.from > o.to {
		return fmt.Errorf("need --step > 0 and --from <= --to")
	}

	embedders := []namedEmbedder{{embed.NewLocal(o.dims), runtime.GOMAXPROCS(0)}}
	if o.url != "" {
		cfg := embed.DefaultConfig()
		cfg.Kind, cfg.URL, cfg.Model, cfg.APIKeyEnv, cfg.Dims = embed.KindOpenAI, o.url, o.model, o.keyEnv, o.urlDims
		cfg.Timeout = units.Duration(30 * time.Second)
		e, err := embed.New(cfg)
		if err != nil {
			return err
		}
		embedders = append(embedders, namedEmbedder{e, o.concurrency})
	}

	guards, err := parseGuards(o.guards)
	if err != nil {
		return err
	}
	var datasets []semeval.Dataset
	for _, name := range strings.Split(o.sets, ",") {
		src, ok := sources[strings.TrimSpace(name)]
		if !ok {
			return fmt.Errorf("--sets: unknown set %q", name)
		}
		pairs, err := semeval.LoadFile(filepath.Join(o.data, src.file), src.parse)
		if err != nil {
			return err
		}
		ds := semeval.Dataset{Name: src.file, Language: src.language, Pairs: pairs}
		if src.tuning && o.half != "" {
			if ds.Pairs, err = semeval.Half(pairs, o.half); err != nil {
				return err
			}
			ds.Name += " (" + o.half + " half)"
		}
		datasets = append(datasets, ds)
	}

	fmt.Fprintf(out, "# Semantic cache eval\n\n```\n%s\n```\n\n", commandLine(args))
	fmt.Fprintf(out, "Nearest stored entry by cosine; a hit needs similarity ≥ threshold and, with guards on, "+
		"cache.GuardsAllow with the guards %s. False-hit rate = false hits / all queries.\n", o.guards)
	type row struct {
		emb, set string
		s        semeval.Score
	}
	var summary []row
	for _, ne := range embedders {
		for _, ds := range datasets {
			s, err := report(ctx, out, ne, guards, ds, o)
			if err != nil {
				return fmt.Errorf("%s on %s: %w", ne.Name(), ds.Name, err)
			}
			summary = append(summary, row{ne.Name(), ds.Name, s})
		}
	}
	if o.long != "" {
		var shared []int
		for _, f := range strings.Split(o.long, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n < 0 {
				return fmt.Errorf("--long: %q is no sentence count", f)
			}
			shared = append(shared, n)
		}
		for _, ne := range embedders {
			for _, ds := range datasets {
				if err := reportLong(ctx, out, ne, guards, ds, shared, o.at); err != nil {
					return err
				}
			}
		}
	}
	fmt.Fprintf(out, "\n## Summary at threshold %.2f, guards on\n\n", o.at)
	fmt.Fprintln(out, "| embedder | set | paraphrase hit rate | false hits on label-0 pairs | false-hit rate (all queries) |")
	fmt.Fprintln(out, "|---|---|---|---|---|")
	for _, r := range summary {
		fmt.Fprintf(out, "| %s | %s | %s | %s | %s |\n", r.emb, r.set, semeval.Pct(r.s.TrueHits, r.s.Paraphrases),
			semeval.Pct(r.s.FalseDifferent, r.s.Queries-r.s.Paraphrases), semeval.Pct(r.s.FalseHits(), r.s.Queries))
	}
	return nil
}

// sources are the shared eval files bench/semantic knows. Tuning sets may
// be halved with --half.
var sources = map[string]struct {
	file, language string
	parse          func(io.Reader) ([]semeval.Pair, error)
	tuning         bool
}{
	"gptcache": {"gptcache_mock_data.json", "English", semeval.LoadGPTCache, false},
	"lcqmc":    {"lcqmc_dev.tsv", "Chinese", semeval.LoadTSV, false},
	"pawsx":    {"pawsx_zh_valid.tsv", "Chinese", semeval.LoadTSV, true},
	"mrpc":     {"mrpc_val.tsv", "English", semeval.LoadTSV, true},
}

// parseGuards turns "numbers,negation" into cache.Guards.
func parseGuards(list string) (cache.Guards, error) {
	var g cache.Guards
	for _, name := range strings.Split(list, ",") {
		switch strings.TrimSpace(name) {
		case "":
		case cache.GuardNumbers:
			g.Numbers = true
		case cache.GuardNegation:
			g.Negation = true
		case cache.GuardOrder:
			g.Order = true
		case cache.GuardEntity:
			g.Entities = true
		default:
			return g, fmt.Errorf("--guards: unknown guard %q", name)
		}
	}
	return g, nil
}

type namedEmbedder struct {
	embed.Embedder
	concurrency int
}

func report(ctx context.Context, out io.Writer, ne namedEmbedder, guards cache.Guards, ds semeval.Dataset, o options) (semeval.Score, error) {
	start := time.Now()
	results, err := semeval.Evaluate(ctx, ne, guards, ds, ne.concurrency)
	if err != nil {
		return semeval.Score{}, err
	}
	elapsed := time.Since(start)
	paraphrases := 0
	for _, p := range ds.Pairs {
		if p.Same {
			paraphrases++
		}
	}
	hasDifferent := paraphrases < len(ds.Pairs)
	fmt.Fprintf(out, "\n## %s (%s), embedder %s\n\n", ds.Name, ds.Language, ne.Name())
	fmt.Fprintf(out, "%d queries (%d paraphrases, %d different meaning), %d entries, embed + search %s.\n",
		len(ds.Pairs), paraphrases, len(ds.Pairs)-paraphrases, entries(ds), elapsed.Round(time.Millisecond))
	if exact := semeval.ScoreAt(results, 0, false, false).Exact; exact > 0 && !o.keepExact {
		fmt.Fprintf(out, "%d queries equal a stored entry up to case, punctuation and spacing; answering them is no semantic "+
			"decision, so they are left out (--keep-exact scores them, as false hits when that entry is not the partner).\n", exact)
	}

	for _, guardsOn := range []bool{true, false} {
		var scores []semeval.Score
		for t := o.from; t <= o.to+1e-9; t += o.step {
			scores = append(scores, semeval.ScoreAt(results, float32(t), guardsOn, o.keepExact))
		}
		label := "guards on (" + o.guards + ")"
		if !guardsOn {
			label = "guards off"
		}
		fmt.Fprintf(out, "\n### %s\n\n", label)
		semeval.WriteTable(out, scores, hasDifferent, guardsOn)
		if safe, ok := semeval.LowestSafeThreshold(results, o.maxFalse, guardsOn, o.keepExact); ok {
			fmt.Fprintf(out, "\nLowest threshold with false-hit rate ≤ %.1f%%: %.4f, paraphrase hit rate %s, false-hit rate %s.\n",
				100*o.maxFalse, safe.Threshold, semeval.Pct(safe.TrueHits, safe.Paraphrases), semeval.Pct(safe.FalseHits(), safe.Queries))
		} else {
			fmt.Fprintf(out, "\nNo threshold keeps the false-hit rate ≤ %.1f%%.\n", 100*o.maxFalse)
		}
	}
	vetoed, vetoedSame := map[string]int{}, map[string]int{}
	for _, r := range results {
		if r.GuardReason != "" && r.Sim >= float32(o.at) && (o.keepExact || !r.Exact) {
			vetoed[r.GuardReason]++
			if r.Same && r.Partner {
				vetoedSame[r.GuardReason]++
			}
		}
	}
	fmt.Fprintf(out, "\nVetoes at %.2f by guard (of them, paraphrases of their own entry):", o.at)
	for _, g := range cache.GuardReasons {
		fmt.Fprintf(out, " %s %d (%d);", g, vetoed[g], vetoedSame[g])
	}
	fmt.Fprintln(out)
	if o.vetoes > 0 {
		shown := map[string]int{}
		fmt.Fprintf(out, "\nParaphrases (label 1) at ≥ %.2f that a guard vetoed:\n\n", o.at)
		for _, r := range results {
			if r.Same && r.Partner && r.GuardReason != "" && r.Sim >= float32(o.at) && shown[r.GuardReason] < o.vetoes {
				shown[r.GuardReason]++
				fmt.Fprintf(out, "- %s %.3f: %q / %q\n", r.GuardReason, r.Sim, r.Query, r.Entry)
			}
		}
	}
	if o.vetoes > 0 {
		n := 0
		fmt.Fprintf(out, "\nDifferent-meaning pairs (label 0) served at ≥ %.2f:\n\n", o.at)
		for _, r := range results {
			if !r.Same && !r.Exact && r.GuardReason == "" && r.Sim >= float32(o.at) && n < o.vetoes {
				n++
				fmt.Fprintf(out, "- %.3f: %q / %q\n", r.Sim, r.Query, r.Entry)
			}
		}
	}
	return semeval.ScoreAt(results, float32(o.at), true, o.keepExact), nil
}

func entries(ds semeval.Dataset) int {
	seen := map[string]bool{}
	for _, p := range ds.Pairs {
		seen[p.First] = true
	}
	return len(seen)
}

// commandLine reconstructs how the program was started, quoting as a shell needs.
func commandLine(args []string) string {
	prog := os.Args[0]
	if strings.Contains(prog, "go-build") { // go run builds into a temporary directory
		prog = "go run ./bench/semantic"
	}
	parts := []string{prog}
	for _, a := range args {
		if a == "" || strings.ContainsAny(a, " \t\n'\"\\$`*?[]{}()<>|&;#~") {
			a = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
		parts = append(parts, a)
	}
	return strings.Join(parts, " ")
}
