// Command gpusim simulates a vLLM-compatible GPU inference node (or TGI,
// SGLang, DashScope) for demos, load tests and tests. See README.md.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"frontdoor/internal/gpusim"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stderr))
}

// modelList is a repeatable --model flag.
type modelList []string

func (m *modelList) String() string { return strings.Join(*m, ",") }

func (m *modelList) Set(v string) error {
	if strings.TrimSpace(v) == "" {
		return errors.New("empty model name")
	}
	*m = append(*m, v)
	return nil
}

// parseFlags turns command-line arguments into a validated gpusim.Config.
func parseFlags(args []string, stderr io.Writer) (gpusim.Config, error) {
	def := gpusim.DefaultConfig()
	fs := flag.NewFlagSet("gpusim", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var models modelList
	var judgeLabels string
	kind := string(def.Kind)
	fs.StringVar(&def.Listen, "listen", def.Listen, "address to listen on (port 0 picks a free port)")
	fs.Var(&models, "model", "served model name (repeatable; default "+gpusim.DefaultModel+")")
	fs.StringVar(&kind, "kind", kind, "server to imitate: vllm|tgi|sglang|dashscope")
	fs.IntVar(&def.MaxNumSeqs, "max-num-seqs", def.MaxNumSeqs, "requests generating at once; the rest wait FIFO")
	fs.IntVar(&def.MaxWaiting, "max-waiting", def.MaxWaiting, "waiting queue limit, beyond it 429 (0 = unlimited)")
	fs.DurationVar(&def.TTFT, "ttft", def.TTFT, "time to first token once a request runs")
	fs.DurationVar(&def.ITL, "itl", def.ITL, "inter-token latency")
	fs.IntVar(&def.OutputTokens, "output-tokens", def.OutputTokens, "tokens per response (capped by max_tokens)")
	fs.Float64Var(&def.Jitter, "jitter", def.Jitter, "± fraction applied to ttft and itl (0.1 = ±10%)")
	fs.Float64Var(&def.FailRate, "fail-rate", def.FailRate, "fraction of requests answered with HTTP 500")
	fs.Float64Var(&def.HangRate, "hang-rate", def.HangRate, "fraction of requests that never answer")
	fs.StringVar(&def.APIKey, "api-key", def.APIKey, "require Authorization: Bearer <key> (default $GPUSIM_API_KEY)")
	fs.IntVar(&def.RPM, "rpm", def.RPM, "requests per minute before 429 (0 = unlimited)")
	fs.IntVar(&def.KVCapacityTokens, "kv-capacity", def.KVCapacityTokens, "KV cache capacity in tokens (for usage metrics)")
	fs.BoolVar(&def.PrefixCache, "prefix-cache", def.PrefixCache, "cache prompt KV blocks (LRU) and skip their prefill, like vLLM's automatic prefix caching")
	fs.IntVar(&def.BlockSize, "block-size", def.BlockSize, "tokens per KV block (prefix-cache granularity)")
	fs.IntVar(&def.KVBlocks, "kv-blocks", def.KVBlocks, "KV capacity in blocks; overrides --kv-capacity (0 = kv-capacity / block-size)")
	fs.DurationVar(&def.PrefillPerToken, "prefill-per-token", def.PrefillPerToken, "prefill time per uncached prompt token, added to ttft (0.2ms = 400ms for 2k tokens)")
	fs.IntVar(&def.EmbeddingDims, "embedding-dims", def.EmbeddingDims, "vector length of /v1/embeddings (a request's \"dimensions\" overrides it)")
	fs.Int64Var(&def.Seed, "seed", def.Seed, "RNG seed for jitter/fail/hang draws (0 = time-based)")
	fs.StringVar(&judgeLabels, "judge-labels", "", "answer judge requests yes/no/unsure from this `FILE` of sentence1<TAB>sentence2<TAB>label lines")
	if err := fs.Parse(args); err != nil {
		return gpusim.Config{}, err
	}
	if fs.NArg() > 0 {
		return gpusim.Config{}, fmt.Errorf("unexpected arguments: %s", strings.Join(fs.Args(), " "))
	}
	if len(models) > 0 {
		def.Models = models
	}
	def.Kind = gpusim.Kind(kind)
	if def.APIKey == "" {
		def.APIKey = os.Getenv("GPUSIM_API_KEY")
	}
	// Zero means "default" in gpusim.Config; on the command line it is a mistake.
	for _, f := range []struct {
		name string
		v    int
	}{{"max-num-seqs", def.MaxNumSeqs}, {"output-tokens", def.OutputTokens}, {"kv-capacity", def.KVCapacityTokens}, {"block-size", def.BlockSize}} {
		if f.v < 1 {
			return gpusim.Config{}, fmt.Errorf("--%s: must be >= 1", f.name)
		}
	}
	if err := def.Validate(); err != nil {
		return gpusim.Config{}, err
	}
	if judgeLabels != "" {
		l, err := gpusim.LoadJudgeLabels(judgeLabels)
		if err != nil {
			return gpusim.Config{}, fmt.Errorf("--judge-labels: %w", err)
		}
		def.JudgeLabels = l
	}
	return def, nil
}

func run(args []string, stderr io.Writer) int {
	cfg, err := parseFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "gpusim: %v\n", err)
		return 2
	}
	srv, err := gpusim.New(cfg)
	if err != nil {
		fmt.Fprintf(stderr, "%v\n", err)
		return 2
	}
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		fmt.Fprintf(stderr, "gpusim: listen %s: %v\n", cfg.Listen, err)
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(ln) }()
	fmt.Fprintf(stderr, "gpusim: %s node serving %s on %s (max-num-seqs=%d ttft=%s itl=%s output-tokens=%d)\n",
		cfg.Kind, strings.Join(cfg.Models, ","), "http://"+ln.Addr().String(), cfg.MaxNumSeqs, cfg.TTFT, cfg.ITL, cfg.OutputTokens)
	if cfg.JudgeLabels != nil {
		fmt.Fprintf(stderr, "gpusim: judging: %s\n", judgeSummary(cfg.JudgeLabels.Stats()))
	}

	select {
	case err := <-serveErr:
		fmt.Fprintf(stderr, "%v\n", err)
		return 1
	case <-ctx.Done():
	}
	stop() // a second signal kills the process the default way
	fmt.Fprintln(stderr, "gpusim: shutting down")
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		fmt.Fprintf(stderr, "%v\n", err)
		return 1
	}
	<-serveErr
	st := srv.Stats()
	fmt.Fprintf(stderr, "gpusim: done: received=%d completed=%d cancelled=%d failed=%d rejected=%d max-running=%d\n",
		st.Received, st.Completed, st.Cancelled, st.Failed, st.Rejected, st.MaxRunning)
	if cfg.JudgeLabels != nil {
		fmt.Fprintf(stderr, "gpusim: judged: yes=%d no=%d unsure=%d\n", st.JudgeYes, st.JudgeNo, st.JudgeUnsure)
	}
	return 0
}

// judgeSummary describes a loaded label file in one line.
func judgeSummary(st gpusim.JudgeLabelsStats) string {
	s := fmt.Sprintf("%d labelled pairs (%d yes, %d no, %d labelled both ways: unsure, %d of one text twice: yes) from %d lines",
		st.Pairs, st.Same, st.Different, st.Conflicting, st.Identical, st.Lines)
	if st.Header {
		s += ", header skipped"
	}
	if st.Malformed > 0 {
		s += fmt.Sprintf(", %d malformed lines skipped (the first is line %d)", st.Malformed, st.FirstMalformed)
	}
	return s
}
