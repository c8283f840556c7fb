package main

import (
	"fmt"
	"math/rand/v2"
	"net/http"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"frontdoor/bench/internal/load"
)

// prefixOpts shapes the prefix-heavy scenario: conversations of several
// turns, each on one of a few long system prompts, against identical
// gpusim nodes with a prefix cache too small to hold everything.
type prefixOpts struct {
	conversations, turns int
	prompts, promptChars int
	rate                 float64       // conversation starts per second (Poisson)
	think                time.Duration // mean pause between an answer and the next turn
	kvBlocks             int           // each node's KV capacity, blocks of 16 tokens
	prefix, affinity     float64       // the weights tried
	balanceAbs           float64       // balancer.prefix.balance_abs (0 = frontdoor's default)
	balanceRel           float64       // balancer.prefix.balance_rel (0 = frontdoor's default)
	only                 string        // run only the policies whose name contains this
	seed                 uint64
}

// conversation is one scripted chat: its system prompt, start and turns.
type conversation struct {
	system int
	at     time.Duration
	users  []string
	think  []time.Duration
	maxTok []int
}

func conversations(o prefixOpts) (systems []string, convs []conversation) {
	rng := rand.New(rand.NewPCG(o.seed, 0x9e3779b9))
	for i := range o.prompts {
		systems = append(systems, fmt.Sprintf("You are assistant number %d. ", i)+text(rng, o.promptChars))
	}
	var at time.Duration
	for range o.conversations {
		at += time.Duration(rng.ExpFloat64() / o.rate * float64(time.Second))
		c := conversation{system: rng.IntN(o.prompts), at: at}
		for range o.turns {
			c.users = append(c.users, text(rng, 200+rng.IntN(600)))
			c.think = append(c.think, time.Duration(rng.ExpFloat64()*float64(o.think)))
			c.maxTok = append(c.maxTok, 16+rng.IntN(49))
		}
		convs = append(convs, c)
	}
	return systems, convs
}

// prefixCluster is 4 identical gpusim nodes with a prefix cache.
func prefixCluster(o prefixOpts) []*node {
	var cluster []*node
	for i := range 4 {
		cluster = append(cluster, &node{name: fmt.Sprintf("gpu%d", i+1), maxConc: 16, flags: []string{
			"--ttft", "40ms", "--itl", "10ms", "--max-num-seqs", "8",
			"--prefix-cache", "--block-size", "16", "--kv-blocks", strconv.Itoa(o.kvBlocks), "--prefill-per-token", "200us",
		}})
	}
	return cluster
}

// startNodes starts a gpusim for each node of cluster, answering
// outputTokens tokens at most, and returns a function that stops them.
func startNodes(dir string, cluster []*node, outputTokens int) (stop func(), err error) {
	procs := &load.Procs{}
	for i, n := range cluster {
		n.port = load.FreePort()
		args := append([]string{"--listen", load.Addr(n.port), "--model", "qwen3-8b",
			"--output-tokens", strconv.Itoa(outputTokens), "--jitter", "0.1", "--seed", fmt.Sprint(i + 1)}, n.flags...)
		if err := procs.Start(exec.Command(filepath.Join(dir, "gpusim"), args...), fmt.Sprintf("http://%s/health", load.Addr(n.port))); err != nil {
			procs.Stop()
			return nil, fmt.Errorf("gpusim %s: %w", n.name, err)
		}
	}
	return func() { procs.Stop() }, nil
}

func runPrefixHeavy(dir string, o prefixOpts) error {
	systems, convs := conversations(o)
	fmt.Printf("\nprefix-heavy: %d conversations of %d turns, Poisson %.1f conversation starts/s, think time exp(mean %s)\n",
		o.conversations, o.turns, o.rate, o.think)
	fmt.Printf("  %d system prompts of ~%d tokens; user turns 50-200 tokens; the answers (16-64 tokens) are sent back in later turns\n",
		o.prompts, o.promptChars/4)
	fmt.Printf("  4 gpusim nodes: TTFT 40ms + 0.2ms per uncached prompt token, ITL 10ms, 8 seqs, --prefix-cache with %d blocks of 16 tokens (%d tokens; all system prompts are %d); max_concurrency 16\n",
		o.kvBlocks, o.kvBlocks*16, o.prompts*o.promptChars/4)
	fmt.Println("  fresh nodes and a fresh frontdoor for each policy; every request is measured; TTFT = first SSE event at the client")
	fmt.Println()
	fmt.Println("| policy | requests | TTFT p50 | TTFT p95 | nodes' prefix-cache hit rate | throughput | errors | load balance (max/min share) | shares |")
	fmt.Println("|---|---|---|---|---|---|---|---|---|")
	type pol struct{ name, weights string }
	pols := []pol{
		{"score, no prefix", "{queue: 0.5, latency: 0.3, memory: 0.2, affinity: 0, prefix: 0}"},
		{fmt.Sprintf("score + affinity %g (rendezvous)", o.affinity), fmt.Sprintf("{queue: 0.5, latency: 0.3, memory: 0.2, affinity: %g, prefix: 0}", o.affinity)},
		{fmt.Sprintf("score + prefix %g", o.prefix), fmt.Sprintf("{queue: 0.5, latency: 0.3, memory: 0.2, affinity: 0, prefix: %g}", o.prefix) + guard(o)},
	}
	var base time.Duration
	var footer strings.Builder
	for i, p := range pols {
		if !strings.Contains(p.name, o.only) {
			continue
		}
		cluster := prefixCluster(o)
		stopNodes, err := startNodes(dir, cluster, 64)
		if err != nil {
			return err
		}
		url, stopFD, err := startFrontdoor(dir, cluster, "score", p.weights)
		if err != nil {
			stopNodes()
			return err
		}
		s, hitRate := driveConversations(url+"/v1/chat/completions", systems, convs), nodesHitRate(cluster)
		stopFD()
		stopNodes()
		lo, hi := 1<<62, 0
		for _, n := range cluster {
			lo, hi = min(lo, s.byNode[n.name]), max(hi, s.byNode[n.name])
		}
		fmt.Printf("| %s | %d | %s | %s | %.0f%% | %.2f req/s | %d | %.2f | %s |\n", p.name, s.ok, ms(s.ttftP50), ms(s.ttftP95),
			100*hitRate, s.throughput, s.errors, float64(hi)/float64(max(lo, 1)), s.shares(cluster))
		if i == 0 {
			base = s.ttftP95
		} else if base > 0 {
			fmt.Fprintf(&footer, "%s: TTFT p95 %.2f× the score policy without prefix\n", p.name, s.ttftP95.Seconds()/base.Seconds())
		}
	}
	fmt.Println()
	fmt.Print(footer.String())
	return nil
}

// guard renders the load-guard settings as balancer keys after weights.
func guard(o prefixOpts) string {
	var kv []string
	if o.balanceAbs > 0 {
		kv = append(kv, fmt.Sprintf("balance_abs: %g", o.balanceAbs))
	}
	if o.balanceRel > 0 {
		kv = append(kv, fmt.Sprintf("balance_rel: %g", o.balanceRel))
	}
	if len(kv) == 0 {
		return ""
	}
	return "\n  prefix: {" + strings.Join(kv, ", ") + "}"
}

// driveConversations runs every conversation from its start time, turn
// after turn, each turn sending the whole history, and summarises them.
func driveConversations(url string, systems []string, convs []conversation) summary {
	client := &http.Client{Timeout: 120 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 1024, DisableCompression: true}}
	var mu sync.Mutex
	var res []result
	var wg sync.WaitGroup
	start := time.Now()
	for _, c := range convs {
		time.Sleep(time.Until(start.Add(c.at)))
		wg.Go(func() {
			msgs := []chatMsg{{"system", systems[c.system]}}
			for t, u := range c.users {
				msgs = append(msgs, chatMsg{"user", u})
				r, answer := sendChat(client, url, msgs, c.maxTok[t])
				r.measured, r.system = true, c.system
				mu.Lock()
				res = append(res, r)
				mu.Unlock()
				msgs = append(msgs, chatMsg{"assistant", answer})
				time.Sleep(c.think[t])
			}
		})
	}
	wg.Wait()
	end := time.Now()
	return summarise(res, start, end.Sub(start))
}

type chatMsg struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// sendChat streams one chat turn and returns its result and the answer's
// text; its TTFT is the first event.
func sendChat(client *http.Client, url string, msgs []chatMsg, maxTokens int) (r result, answer string) {
	c := streamChat(client, url, msgs, maxTokens, false)
	return result{start: c.start, ttft: c.ttft, end: c.end, e2e: c.end.Sub(c.start), node: c.node, err: c.err}, c.answer
}

// nodesHitRate is the cluster's prefix-cache hit rate from the nodes'
// own counters: tokens hit over tokens queried, summed over the nodes
// (they start empty, so the totals are this run's).
func nodesHitRate(cluster []*node) float64 {
	var hits, queries float64
	for _, n := range cluster {
		m, err := load.ScrapeMetrics("http://" + load.Addr(n.port))
		if err != nil {
			continue
		}
		h, _ := m.Sum("vllm:prefix_cache_hits_total", nil)
		q, _ := m.Sum("vllm:prefix_cache_queries_total", nil)
		hits, queries = hits+h, queries+q
	}
	if queries == 0 {
		return 0
	}
	return hits / queries
}
