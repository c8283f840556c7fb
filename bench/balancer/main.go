// Command balancer compares frontdoor's node-selection policies on one
// heterogeneous gpusim cluster: a fast node, a slow node and a node with a
// small batch. The same open-loop workload (Poisson arrivals, mixed prompt
// and answer lengths, streaming) runs against frontdoor under round_robin,
// least_inflight and score, restarting frontdoor for each; TTFT is measured
// at the client. A second scenario sends a few long shared system prompts
// with affinity weight 0 and 0.3. A third, prefix-heavy, runs multi-turn
// conversations on long system prompts against 4 gpusim nodes with a
// prefix cache, comparing the score policy without prefix, with
// rendezvous affinity and with the prefix scorer. The slo scenario drives
// 4 nodes past a 1 s TTFT with closed-loop users sending long prompts that
// share nothing, with a fast hosted stand-in as spill-over, and runs
// without and with spillover.max_predicted_ttft (slo.go).
//
//	go run ./bench/balancer [-scenario all|policies|prefix-heavy|long|slo] [-duration 20s] [-rate 10] [-seed 1]
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"frontdoor/bench/internal/load"
)

// node is one gpusim process of the cluster.
type node struct {
	name, role string
	flags      []string
	maxConc    int // frontdoor's max_concurrency: twice the engine's batch
	port       int
}

func main() {
	dur := flag.Duration("duration", 20*time.Second, "measured length of each policy run")
	warm := flag.Duration("warmup", 3*time.Second, "unmeasured lead-in of each run, at the same rate")
	rate := flag.Float64("rate", 10, "mean arrivals per second (Poisson)")
	affDur := flag.Duration("affinity-duration", 12*time.Second, "measured length of each affinity run")
	seed := flag.Uint64("seed", 1, "workload seed (the same workload for every policy)")
	scenario := flag.String("scenario", "all", "all | policies (with the shared system prompts) | prefix-heavy | long | slo")
	var po prefixOpts
	flag.IntVar(&po.conversations, "conversations", 200, "prefix-heavy: conversations")
	flag.IntVar(&po.turns, "turns", 5, "prefix-heavy: turns per conversation")
	flag.IntVar(&po.prompts, "system-prompts", 10, "prefix-heavy: distinct system prompts")
	flag.IntVar(&po.promptChars, "system-chars", 8000, "prefix-heavy: characters per system prompt (gpusim counts 4 a token)")
	flag.Float64Var(&po.rate, "conversation-rate", 4, "prefix-heavy: conversation starts per second (Poisson)")
	flag.DurationVar(&po.think, "think", time.Second, "prefix-heavy: mean pause between an answer and the next turn")
	flag.IntVar(&po.kvBlocks, "kv-blocks", 1536, "prefix-heavy: each node's KV capacity in 16-token blocks")
	flag.Float64Var(&po.prefix, "prefix-weight", 3, "prefix-heavy: the prefix weight tried")
	flag.Float64Var(&po.affinity, "affinity-weight", 0.5, "prefix-heavy: the affinity weight tried")
	flag.Float64Var(&po.balanceAbs, "balance-abs", 0, "prefix-heavy: balancer.prefix.balance_abs (0 = the default)")
	flag.Float64Var(&po.balanceRel, "balance-rel", 0, "prefix-heavy: balancer.prefix.balance_rel (0 = the default)")
	flag.StringVar(&po.only, "only", "", "prefix-heavy: run only the policies whose name contains this")
	var lo longOpts
	flag.StringVar(&lo.sim, "sim", "llmd", "long: the nodes, llmd (llm-d-inference-sim) or gpusim")
	flag.StringVar(&lo.simPath, "llmd", "../shared/peers/llm-d-inference-sim/llm-d-inference-sim", "long: the llm-d-inference-sim binary")
	flag.DurationVar(&lo.duration, "long-duration", 10*time.Minute, "long: the run's length")
	flag.DurationVar(&lo.window, "window", time.Minute, "long: the reporting window")
	flag.IntVar(&lo.users, "users", 32, "long: closed-loop chat users")
	flag.IntVar(&lo.turns, "long-turns", 6, "long: turns per conversation")
	flag.IntVar(&lo.prompts, "long-system-prompts", 16, "long: distinct system prompts")
	flag.IntVar(&lo.systemTokens, "system-tokens", 1500, "long: words per system prompt (llm-d counts a token a word)")
	flag.DurationVar(&lo.think, "long-think", time.Second, "long: mean pause between an answer and the next turn")
	flag.IntVar(&lo.kvBlocks, "long-kv-blocks", 1024, "long: each node's KV cache in 16-token blocks")
	flag.IntVar(&lo.concurrencyCap, "max-concurrency", 16, "long and slo: frontdoor's max_concurrency per node (slo: 40 unless set)")
	flag.StringVar(&lo.policies, "policies", "prefix,noprefix", "long: the policies run, prefix and/or noprefix")
	var so sloOpts
	flag.DurationVar(&so.duration, "slo-duration", 90*time.Second, "slo: measured length of each run (without, then with max_predicted_ttft)")
	flag.DurationVar(&so.warm, "slo-warmup", 20*time.Second, "slo: unmeasured lead-in of each run (the predictor learns)")
	flag.IntVar(&so.users, "slo-users", 170, "slo: closed-loop users")
	flag.DurationVar(&so.think, "slo-think", time.Second, "slo: mean pause between an answer and the user's next request")
	sloWords := flag.String("slo-words", "150-700", "slo: prompt length range in words (about 1 ms of prefill a word)")
	flag.DurationVar(&lo.spillTTFT, "spill-ttft", 200*time.Millisecond, "slo: the hosted stand-in's TTFT")
	flag.DurationVar(&so.maxPredicted, "max-predicted-ttft", time.Second, "slo: spillover.max_predicted_ttft of the second run")
	flag.Parse()
	if _, err := fmt.Sscanf(*sloWords, "%d-%d", &so.minWords, &so.maxWords); err != nil || so.minWords < 1 || so.maxWords < so.minWords {
		fmt.Fprintln(os.Stderr, "balancer bench: -slo-words: want MIN-MAX, e.g. 150-700")
		os.Exit(2)
	}
	po.seed = *seed
	lo.seed, lo.prefixWeight = *seed, po.prefix
	var err error
	switch *scenario {
	case "all", "policies":
		err = run(*dur, *warm, *affDur, *rate, *seed)
		if err == nil && *scenario == "all" {
			err = prefixHeavy(po)
		}
	case "prefix-heavy":
		err = prefixHeavy(po)
	case "long":
		err = runLong(lo)
	case "slo":
		if !isFlagSet("sim") {
			lo.sim = "gpusim"
		}
		if !isFlagSet("max-concurrency") {
			lo.concurrencyCap = 40
		}
		so.long = lo
		err = runSLO(so)
	default:
		err = fmt.Errorf("-scenario %q: want all, policies, prefix-heavy, long or slo", *scenario)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "balancer bench:", err)
		os.Exit(1)
	}
}

// isFlagSet reports whether the command line set the flag name.
func isFlagSet(name string) bool {
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

func prefixHeavy(o prefixOpts) error {
	dir, err := load.BuildTemp("fd-balancer-bench", "frontdoor", "gpusim")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	fmt.Printf("command: go run ./bench/balancer -scenario prefix-heavy -conversations %d -turns %d -system-prompts %d -system-chars %d -conversation-rate %g -think %s -kv-blocks %d -prefix-weight %g -affinity-weight %g -seed %d\n",
		o.conversations, o.turns, o.prompts, o.promptChars, o.rate, o.think, o.kvBlocks, o.prefix, o.affinity, o.seed)
	return runPrefixHeavy(dir, o)
}

func run(dur, warm, affDur time.Duration, rate float64, seed uint64) error {
	dir, err := load.BuildTemp("fd-balancer-bench", "frontdoor", "gpusim")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	cluster := []*node{
		{name: "fast", role: "fast: TTFT 50ms, ITL 10ms, 16 seqs", maxConc: 32,
			flags: []string{"--ttft", "50ms", "--itl", "10ms", "--max-num-seqs", "16"}},
		{name: "slow", role: "slow: TTFT 300ms, ITL 40ms, 10 seqs", maxConc: 20,
			flags: []string{"--ttft", "300ms", "--itl", "40ms", "--max-num-seqs", "10"}},
		{name: "small", role: "small: TTFT 100ms, ITL 15ms, 4 seqs, 16k-token KV", maxConc: 8,
			flags: []string{"--ttft", "100ms", "--itl", "15ms", "--max-num-seqs", "4", "--kv-capacity", "16384"}},
	}
	stopNodes, err := startNodes(dir, cluster, 512)
	if err != nil {
		return err
	}
	defer stopNodes()

	fmt.Printf("command: go run ./bench/balancer -duration %s -warmup %s -rate %g -affinity-duration %s -seed %d\n", dur, warm, rate, affDur, seed)
	fmt.Println("cluster (gpusim, --jitter 0.1, frontdoor max_concurrency = 2 × the node's batch, weight 1):")
	for _, n := range cluster {
		fmt.Printf("  - %s (max_concurrency %d)\n", n.role, n.maxConc)
	}
	fmt.Printf("workload: Poisson %.0f req/s, %s measured after %s warm-up, streaming; prompts 100-4000 chars; max_tokens 16/32/64/128/256; TTFT = first SSE event at the client\n",
		rate, dur, warm)
	fmt.Println("frontdoor: cache off, balancer defaults (weights queue 0.5, latency 0.3, memory 0.2; scrape 1s), restarted per policy")
	fmt.Println()

	jobs := workload(seed, rate, warm+dur, false)
	fmt.Println("| policy | requests | TTFT p50 | TTFT p95 | TTFT p99 | e2e p95 | throughput (completed in window) | errors | share fast/slow/small |")
	fmt.Println("|---|---|---|---|---|---|---|---|---|")
	results := map[string]summary{}
	for _, pol := range []string{"round_robin", "least_inflight", "score"} {
		s, err := runPolicy(dir, cluster, pol, 0, jobs, warm)
		if err != nil {
			return fmt.Errorf("%s: %w", pol, err)
		}
		results[pol] = s
		fmt.Println(s.row(pol, cluster))
	}
	rr, sc := results["round_robin"], results["score"]
	fmt.Printf("\nscore vs round_robin: TTFT p95 %.2f×, throughput %.2f×, errors %d\n",
		sc.ttftP95.Seconds()/rr.ttftP95.Seconds(), sc.throughput/rr.throughput, sc.errors)

	// Faster arrivals, so that the fast node alone cannot take them all
	// and there is a choice for affinity to make.
	affRate := rate * 1.6
	fmt.Printf("\nshared system prompts (4 system prompts of ~3000 chars, score policy, Poisson %.0f req/s):\n", affRate)
	fmt.Println("| affinity weight | requests | TTFT p50 | TTFT p95 | e2e p95 | errors | stickiness | share fast/slow/small |")
	fmt.Println("|---|---|---|---|---|---|---|---|")
	ajobs := workload(seed+1, affRate, warm+affDur, true)
	for _, w := range []float64{0, 0.3} {
		s, err := runPolicy(dir, cluster, "score", w, ajobs, warm)
		if err != nil {
			return fmt.Errorf("affinity %g: %w", w, err)
		}
		fmt.Printf("| %g | %d | %s | %s | %s | %d | %.0f%% | %s |\n", w, s.ok, ms(s.ttftP50), ms(s.ttftP95), ms(s.e2eP95), s.errors, 100*s.stickiness, s.shares(cluster))
	}
	fmt.Println("\nstickiness: per system prompt, the share of its requests on its most used node, averaged.")
	fmt.Println("These nodes run without --prefix-cache, so affinity cannot lower TTFT here; it shows only whether requests sharing a prompt")
	fmt.Println("land together (the prefix weight is 0 in this scenario). On a cluster this uneven, load and latency dominate the score.")
	fmt.Println("The prefix-heavy scenario measures prefix-aware routing against nodes with a prefix cache.")
	return nil
}

// job is one request of the workload.
type job struct {
	at        time.Duration
	system    int // index of the shared system prompt, -1 for none
	prompt    string
	maxTokens int
}

var words = strings.Fields(`the of and to in is was for on are with as by at be this from or have an which
not their but more other can were when they all there been has one would new what some time about only into
cache token batch queue node model latency answer prompt request memory engine score weight`)

func text(rng *rand.Rand, chars int) string {
	var b strings.Builder
	for b.Len() < chars {
		b.WriteString(words[rng.IntN(len(words))])
		b.WriteByte(' ')
	}
	return b.String()
}

// workload draws the arrival times and request shapes from seed.
func workload(seed uint64, rate float64, d time.Duration, shared bool) []job {
	rng := rand.New(rand.NewPCG(seed, 0xba1a))
	var systems []string
	if shared {
		for i := 0; i < 4; i++ {
			systems = append(systems, fmt.Sprintf("System prompt %d. ", i)+text(rng, 3000))
		}
	}
	var jobs []job
	maxTok := []int{16, 32, 64, 128, 256}
	for t := time.Duration(0); ; {
		t += time.Duration(rng.ExpFloat64() / rate * float64(time.Second))
		if t >= d {
			return jobs
		}
		j := job{at: t, system: -1, maxTokens: maxTok[rng.IntN(len(maxTok))]}
		// Prompt lengths are log-uniform between 100 and 4000 characters.
		j.prompt = text(rng, int(100*math.Exp(rng.Float64()*math.Log(40))))
		if shared {
			j.system = rng.IntN(len(systems))
			j.prompt = systems[j.system] + "\x00" + j.prompt
		}
		jobs = append(jobs, j)
	}
}

func (j job) body() []byte {
	type msg struct {
		Role    string `json:"role"`
		Content string `json:"content"`
	}
	var msgs []msg
	if sys, user, ok := strings.Cut(j.prompt, "\x00"); ok {
		msgs = []msg{{"system", sys}, {"user", user}}
	} else {
		msgs = []msg{{"user", j.prompt}}
	}
	b, _ := json.Marshal(map[string]any{"model": "qwen3-8b", "messages": msgs, "max_tokens": j.maxTokens, "stream": true})
	return b
}

type result struct {
	measured  bool
	start     time.Time
	ttft, e2e time.Duration
	end       time.Time
	node      string
	system    int
	err       error
}

type summary struct {
	ok, errors                int
	ttftP50, ttftP95, ttftP99 time.Duration
	e2eP95                    time.Duration
	throughput                float64
	byNode                    map[string]int
	stickiness                float64
	firstErr                  error
}

func (s summary) row(pol string, cluster []*node) string {
	return fmt.Sprintf("| %s | %d | %s | %s | %s | %s | %.2f req/s | %d | %s |", pol, s.ok, ms(s.ttftP50), ms(s.ttftP95), ms(s.ttftP99), ms(s.e2eP95), s.throughput, s.errors, s.shares(cluster))
}

func (s summary) shares(cluster []*node) string {
	var parts []string
	for _, n := range cluster {
		parts = append(parts, fmt.Sprintf("%.0f%%", 100*float64(s.byNode[n.name])/float64(max(1, s.ok))))
	}
	return strings.Join(parts, "/")
}

func ms(d time.Duration) string { return fmt.Sprintf("%.0f ms", float64(d.Microseconds())/1000) }

// runPolicy starts frontdoor with the policy, replays jobs against it and
// stops it.
func runPolicy(dir string, cluster []*node, policy string, affinity float64, jobs []job, warm time.Duration) (summary, error) {
	base, stop, err := startFrontdoor(dir, cluster, policy, fmt.Sprintf("{queue: 0.5, latency: 0.3, memory: 0.2, affinity: %g, prefix: 0}", affinity))
	if err != nil {
		return summary{}, err
	}
	defer stop()
	return replay(base+"/v1/chat/completions", jobs, warm), nil
}

// startFrontdoor starts frontdoor in front of cluster with the policy and
// the weights (a YAML flow mapping) and returns its base URL and a stop
// function.
func startFrontdoor(dir string, cluster []*node, policy, weights string) (base string, stop func(), err error) {
	var nodes strings.Builder
	for _, n := range cluster {
		fmt.Fprintf(&nodes, "  - {name: %s, url: http://127.0.0.1:%d, kind: vllm, models: [qwen3-8b], max_concurrency: %d}\n", n.name, n.port, n.maxConc)
	}
	cfg := fmt.Sprintf(`logging: {level: warn, access_log: false}
cache: {backend: off}
balancer:
  policy: %s
  weights: %s
nodes:
%s`, policy, weights, nodes.String())
	procs := &load.Procs{}
	base, p, err := procs.StartFrontdoor(load.Frontdoor{Dir: dir, Name: "fd-" + policy, Config: cfg, Ready: "/readyz"})
	if err != nil {
		procs.Stop()
		return "", nil, err
	}
	return base, func() { procs.Terminate(p, 10*time.Second) }, nil
}

// replay sends every job at its arrival time (open loop) and waits for
// all answers.
func replay(url string, jobs []job, warm time.Duration) summary {
	client := &http.Client{Timeout: 120 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 1024, DisableCompression: true}}
	res := make([]result, len(jobs))
	var wg sync.WaitGroup
	start := time.Now()
	for i, j := range jobs {
		time.Sleep(time.Until(start.Add(j.at)))
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := send(client, url, j)
			r.measured, r.system = j.at >= warm, j.system
			res[i] = r
		}()
	}
	wg.Wait()
	return summarise(res, start.Add(warm), jobs[len(jobs)-1].at-warm)
}

func send(client *http.Client, url string, j job) result {
	c := streamBody(client, url, j.body(), false)
	return result{start: c.start, ttft: c.ttft, end: c.end, e2e: c.end.Sub(c.start), node: c.node, err: c.err}
}

// summarise reduces the measured requests (those that arrived after the
// warm-up). Throughput counts the measured requests completed by the end of
// the measured window, per second of it: a policy that lets a queue build
// up completes fewer.
func summarise(res []result, windowStart time.Time, window time.Duration) summary {
	s := summary{byNode: map[string]int{}}
	windowEnd := windowStart.Add(window)
	inWindow := 0
	var ttft, e2e []time.Duration
	perSystem := map[int]map[string]int{}
	for _, r := range res {
		if !r.measured {
			continue
		}
		if r.err != nil {
			s.errors++
			if s.firstErr == nil {
				s.firstErr = r.err
			}
			continue
		}
		s.ok++
		ttft, e2e = append(ttft, r.ttft), append(e2e, r.e2e)
		s.byNode[r.node]++
		if !r.end.After(windowEnd) {
			inWindow++
		}
		if r.system >= 0 {
			if perSystem[r.system] == nil {
				perSystem[r.system] = map[string]int{}
			}
			perSystem[r.system][r.node]++
		}
	}
	s.ttftP50, s.ttftP95, s.ttftP99 = quantile(ttft, 0.5), quantile(ttft, 0.95), quantile(ttft, 0.99)
	s.e2eP95 = quantile(e2e, 0.95)
	s.throughput = float64(inWindow) / window.Seconds()
	for _, byNode := range perSystem {
		top, sum := 0, 0
		for _, c := range byNode {
			top, sum = max(top, c), sum+c
		}
		s.stickiness += float64(top) / float64(sum) / float64(len(perSystem))
	}
	if s.firstErr != nil {
		fmt.Fprintln(os.Stderr, "first error:", s.firstErr)
	}
	return s
}

func quantile(d []time.Duration, q float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	return d[min(len(d)-1, int(q*float64(len(d))))]
}
