// Command rediscache compares the cache backends under a shared load: memory
// (one gateway), Redis with the in-process vector index (redis-local) and
// Redis with RediSearch (redisearch), each with several frontdoor replicas on
// one redis-server. It stores a generated corpus of questions through the
// gateways, waits for the write-back to settle, then sends paraphrases of
// the stored questions and reports hit rates, errors and lookup latencies as
// a Markdown table.
//
//	go run ./bench/rediscache [-stores 20000] [-queries 20000] [-sizes 0,80000]
//	    [-conc 32] [-replicas 3] [-backends memory,redis-local,redisearch]
//
// See README.md beside this file.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"frontdoor/bench/internal/load"
)

// opts are the command-line settings.
type opts struct {
	stores, queries, conc, replicas int
	sizes                           []int
	backends                        []string
	seed                            uint64
	settleQuiet, settleMax          time.Duration
	// Keys emitted into the gateways' config only when set.
	index, redisTimeout, cacheYAML string
	hnswM, efConstruction, efRun   int
	queryRPS                       float64
}

func main() {
	var o opts
	sizes := flag.String("sizes", "0,80000", "comma-separated distractor fills: entries stored before the measured stores")
	backends := flag.String("backends", "memory,redis-local,redisearch", "comma-separated backends: memory, redis-local, redisearch")
	flag.IntVar(&o.stores, "stores", 20000, "questions stored (Cache-Control: no-cache) before the queries")
	flag.IntVar(&o.queries, "queries", 20000, "paraphrased queries of stored questions (the measured phase)")
	flag.IntVar(&o.conc, "conc", 32, "concurrent clients, spread round-robin over the replicas")
	flag.Float64Var(&o.queryRPS, "query-rps", 0, "pace the queries at this many per second over all clients; 0: as fast as the clients get answers")
	flag.IntVar(&o.replicas, "replicas", 3, "frontdoor processes for the Redis backends (memory always runs one)")
	flag.Uint64Var(&o.seed, "seed", 1, "corpus and paraphrase seed")
	flag.DurationVar(&o.settleQuiet, "settle", 3*time.Second, "write-back has settled when no replica's vector count grew for this long (the gauge refreshes every 2s)")
	flag.DurationVar(&o.settleMax, "settle-max", 3*time.Minute, "longest wait for the write-back to settle")
	flag.StringVar(&o.index, "index", "", "cache.redis_index.type (hnsw|flat); unset: not emitted")
	flag.IntVar(&o.hnswM, "hnsw-m", 0, "cache.redis_index.m; 0: not emitted")
	flag.IntVar(&o.efConstruction, "ef-construction", 0, "cache.redis_index.ef_construction; 0: not emitted")
	flag.IntVar(&o.efRun, "ef-runtime", 0, "cache.redis_index.ef_runtime; 0: not emitted")
	flag.StringVar(&o.redisTimeout, "redis-timeout", "", "redis.timeout (e.g. 100ms); unset: the default")
	flag.StringVar(&o.cacheYAML, "cache-yaml", "", "extra YAML lines appended (indented) under cache:, e.g. 'coalesce: false'")
	flag.Parse()
	var err error
	if o.sizes, err = parseInts(*sizes); err != nil {
		fail(fmt.Errorf("-sizes: %w", err))
	}
	for _, b := range strings.Split(*backends, ",") {
		switch b = strings.TrimSpace(b); b {
		case "memory", "redis-local", "redisearch":
			o.backends = append(o.backends, b)
		case "":
		default:
			fail(fmt.Errorf("-backends: unknown backend %q (memory, redis-local, redisearch)", b))
		}
	}
	if o.stores < 1 || o.queries < 1 || o.conc < 1 || o.replicas < 1 || len(o.backends) == 0 || len(o.sizes) == 0 {
		fail(errors.New("-stores, -queries, -conc, -replicas must be >= 1 and -backends, -sizes non-empty"))
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, o); err != nil {
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "rediscache:", err)
	os.Exit(1)
}

func parseInts(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil || n < 0 {
			return nil, fmt.Errorf("%q is not a count", f)
		}
		out = append(out, n)
	}
	return out, nil
}

// env is what every run shares.
type env struct {
	dir, module      string
	simPort          int
	procs            *load.Procs
	stored, distract []fact
	storeReqs        []request
	queryReqs        []request
	queryOf          []int // stored index each query paraphrases
}

func run(ctx context.Context, o opts) error {
	e := &env{procs: &load.Procs{}}
	needRedis := false
	for _, b := range o.backends {
		needRedis = needRedis || b != "memory"
	}
	if needRedis {
		var err error
		if e.module, err = load.RediSearchModule(); err != nil {
			return fmt.Errorf("%w (the Redis backends need it; -backends memory does not)", err)
		}
		if _, err := exec.LookPath("redis-server"); err != nil {
			return fmt.Errorf("redis-server is not installed (apt-get install -y redis-server): %w", err)
		}
	}
	fmt.Fprintln(os.Stderr, "building frontdoor and gpusim")
	dir, err := load.BuildTemp("fd-rediscache", "frontdoor", "gpusim")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	e.dir = dir
	defer e.procs.Stop()
	e.simPort = load.FreePort()
	sim, err := e.procs.Launch(exec.Command(filepath.Join(dir, "gpusim"), "--listen", load.Addr(e.simPort),
		"--model", "qwen3-8b", "--ttft", "0", "--itl", "0", "--max-num-seqs", "512", "--output-tokens", "16"), filepath.Join(dir, "gpusim.log"))
	if err != nil {
		return err
	}
	if err := load.WaitUp(fmt.Sprintf("http://%s/health", load.Addr(e.simPort))); err != nil {
		return fmt.Errorf("gpusim: %w\n%s", err, sim.LogExcerpt())
	}

	maxFill := 0
	for _, s := range o.sizes {
		maxFill = max(maxFill, s)
	}
	facts, err := corpus(o.seed, o.stores+maxFill)
	if err != nil {
		return err
	}
	e.stored, e.distract = facts[:o.stores], facts[o.stores:]
	for _, f := range e.stored {
		e.storeReqs = append(e.storeReqs, request{f.body(f.text), tenants[f.tenant].key})
	}
	// Each query paraphrases a stored question: every one once (shuffled)
	// before any is asked again.
	qrng := rand.New(rand.NewPCG(o.seed, 0x9e7a))
	for len(e.queryOf) < o.queries {
		for _, k := range qrng.Perm(o.stores) {
			if len(e.queryOf) == o.queries {
				break
			}
			f := e.stored[k]
			e.queryOf = append(e.queryOf, k)
			e.queryReqs = append(e.queryReqs, request{f.body(f.paraphrase(qrng)), tenants[f.tenant].key})
		}
	}

	var results []*result
	for _, size := range o.sizes {
		for _, backend := range o.backends {
			r := runOne(ctx, o, e, backend, size)
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if r.err != nil {
				fmt.Fprintf(os.Stderr, "  %s, fill %d: %v\n", backend, size, r.err)
			}
			results = append(results, r)
		}
	}
	report(o, e, results)
	return nil
}
