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
	"strings"
	"time"

	"frontdoor/embed"
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

	gpt, err := loadFile(filepath.Join(o.data, "gptcache_mock_data.json"), loadGPTCache)
	if err != nil {
		return err
	}
	lcqmc, err := loadFile(filepath.Join(o.data, "lcqmc_dev.tsv"), loadLCQMC)
	if err != nil {
		return err
	}
	datasets := []dataset{
		{name: "gptcache_mock_data.json", language: "English", pairs: gpt},
		{name: "lcqmc_dev.tsv", language: "Chinese", pairs: lcqmc},
	}

	fmt.Fprintf(out, "# Semantic cache eval\n\n```\n%s\n```\n\n", commandLine(args))
	fmt.Fprintf(out, "Nearest stored entry by cosine; a hit needs similarity ≥ threshold and, with guards on, "+
		"cache.GuardsAllow(DefaultGuards()). False-hit rate = false hits / all queries.\n")
	for _, ne := range embedders {
		for _, ds := range datasets {
			if err := report(ctx, out, ne, ds, o); err != nil {
				return fmt.Errorf("%s on %s: %w", ne.Name(), ds.name, err)
			}
		}
	}
	return nil
}

type namedEmbedder struct {
	embed.Embedder
	concurrency int
}

func report(ctx context.Context, out io.Writer, ne namedEmbedder, ds dataset, o options) error {
	start := time.Now()
	results, err := evaluate(ctx, ne, ds, ne.concurrency)
	if err != nil {
		return err
	}
	elapsed := time.Since(start)
	paraphrases := 0
	for _, p := range ds.pairs {
		if p.same {
			paraphrases++
		}
	}
	hasDifferent := paraphrases < len(ds.pairs)
	fmt.Fprintf(out, "\n## %s (%s), embedder %s\n\n", ds.name, ds.language, ne.Name())
	fmt.Fprintf(out, "%d queries (%d paraphrases, %d different meaning), %d entries, embed + search %s.\n",
		len(ds.pairs), paraphrases, len(ds.pairs)-paraphrases, entries(ds), elapsed.Round(time.Millisecond))
	if exact := scoreAt(results, 0, false, false).exact; exact > 0 && !o.keepExact {
		fmt.Fprintf(out, "%d queries equal a stored entry up to case, punctuation and spacing; answering them is no semantic "+
			"decision, so they are left out (--keep-exact scores them, as false hits when that entry is not the partner).\n", exact)
	}

	for _, guardsOn := range []bool{true, false} {
		var scores []score
		for t := o.from; t <= o.to+1e-9; t += o.step {
			scores = append(scores, scoreAt(results, float32(t), guardsOn, o.keepExact))
		}
		label := "guards on (numbers, negation)"
		if !guardsOn {
			label = "guards off"
		}
		fmt.Fprintf(out, "\n### %s\n\n", label)
		writeTable(out, scores, hasDifferent, guardsOn)
		if safe, ok := lowestSafeThreshold(results, o.maxFalse, guardsOn, o.keepExact); ok {
			fmt.Fprintf(out, "\nLowest threshold with false-hit rate ≤ %.1f%%: %.4f, paraphrase hit rate %s, false-hit rate %s.\n",
				100*o.maxFalse, safe.threshold, pct(safe.trueHits, safe.paraphrases), pct(safe.falseHits(), safe.queries))
		} else {
			fmt.Fprintf(out, "\nNo threshold keeps the false-hit rate ≤ %.1f%%.\n", 100*o.maxFalse)
		}
	}
	return nil
}

func entries(ds dataset) int {
	seen := map[string]bool{}
	for _, p := range ds.pairs {
		seen[p.first] = true
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
