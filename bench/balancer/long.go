package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"frontdoor/bench/internal/load"
)

// longOpts shapes the long scenario: closed-loop chat users, each running
// conversations on one of a few long system prompts, for minutes, against
// 4 nodes with a prefix KV cache (llm-d-inference-sim or gpusim).
type longOpts struct {
	sim            string // llmd | gpusim
	simPath        string // the llm-d-inference-sim binary
	duration       time.Duration
	users, turns   int
	prompts        int
	systemTokens   int
	think          time.Duration
	kvBlocks       int
	prefixWeight   float64
	policies       string // comma-separated: prefix, noprefix
	extraBalancer  string // more balancer keys (YAML, indented two spaces)
	extraConfig    string // more top-level frontdoor config
	seed           uint64
	window         time.Duration // the reporting window
	spillTTFT      time.Duration // SLO scenario: the hosted stand-in's TTFT
	concurrencyCap int           // frontdoor's max_concurrency per node
}

// longTurn is one answered (or failed) turn.
type longTurn struct {
	start      time.Time
	ttft       time.Duration
	node       string
	prev       string // the node of the conversation's previous turn ("" on the first)
	spilled    bool
	err        error
	promptToks int
}

// simWords approximates llm-d's dummy tokenizer (one token a word or
// punctuation mark) with words alone.
func wordText(rng *rand.Rand, n int) string {
	var b strings.Builder
	for i := 0; i < n; i++ {
		b.WriteString(words[rng.IntN(len(words))])
		b.WriteByte(' ')
	}
	return b.String()
}

// longCluster starts 4 prefix-caching nodes and returns them with a stop
// function.
func longCluster(dir string, o longOpts) ([]*node, func(), error) {
	procs := &load.Procs{}
	var cluster []*node
	for i := range 4 {
		n := &node{name: fmt.Sprintf("gpu%d", i+1), maxConc: o.concurrencyCap, port: load.FreePort()}
		var c *exec.Cmd
		switch o.sim {
		case "llmd":
			c = exec.Command(o.simPath, "--model", "qwen3-8b", "--port", strconv.Itoa(n.port), "--force-dummy-tokenizer",
				"--enable-kvcache", "--kv-cache-size", strconv.Itoa(o.kvBlocks), "--block-size", "16", "--max-num-seqs", "8",
				"--max-model-len", "8192", "--latency-calculator", "per-token", "--prefill-overhead", "20ms",
				"--prefill-time-per-token", "1ms", "--inter-token-latency", "10ms", "--zmq-endpoint", "")
			c.Env = append(os.Environ(), "POD_IP=127.0.0.1")
		default:
			// gpusim counts 4 characters a token; the words here average
			// about 5.2 characters with their space, so 1 ms a word is
			// about 0.77 ms a gpusim token.
			c = exec.Command(filepath.Join(dir, "gpusim"), "--listen", load.Addr(n.port), "--model", "qwen3-8b",
				"--output-tokens", "64", "--seed", fmt.Sprint(i+1), "--ttft", "20ms", "--itl", "10ms", "--max-num-seqs", "8",
				"--prefix-cache", "--block-size", "16", "--kv-blocks", strconv.Itoa(o.kvBlocks*13/10), "--prefill-per-token", "770us")
		}
		if err := procs.Start(c, fmt.Sprintf("http://%s/v1/models", load.Addr(n.port))); err != nil {
			procs.Stop()
			return nil, nil, fmt.Errorf("%s node %s: %w", o.sim, n.name, err)
		}
		cluster = append(cluster, n)
	}
	return cluster, func() { procs.Stop() }, nil
}

func runLong(o longOpts) error {
	dir, err := load.BuildTemp("fd-balancer-long", "frontdoor", "gpusim")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	if o.sim == "llmd" {
		if _, err := os.Stat(o.simPath); err != nil {
			return fmt.Errorf("llm-d-inference-sim: %w (set -llmd)", err)
		}
	}
	fmt.Printf("command: go run ./bench/balancer -scenario long -sim %s -duration %s -users %d -turns %d -system-prompts %d -system-tokens %d -think %s -kv-blocks %d -policies %s -seed %d\n",
		o.sim, o.duration, o.users, o.turns, o.prompts, o.systemTokens, o.think, o.kvBlocks, o.policies, o.seed)
	fmt.Printf("shape: 4 %s nodes (8 seqs, %d blocks of 16 tokens, TTFT 20 ms + 1 ms an uncached prompt token, ITL 10 ms), frontdoor max_concurrency %d;\n",
		o.sim, o.kvBlocks, o.concurrencyCap)
	fmt.Printf("  %d closed-loop chat users, each running conversations of %d turns on one of %d system prompts of %d words;\n",
		o.users, o.turns, o.prompts, o.systemTokens)
	fmt.Printf("  user turns 10-40 words, answers 16-64 tokens sent back in later turns, think time exp(mean %s); TTFT = first content at the client\n\n", o.think)
	for _, pol := range strings.Split(o.policies, ",") {
		if err := runLongPolicy(dir, o, strings.TrimSpace(pol)); err != nil {
			return fmt.Errorf("%s: %w", pol, err)
		}
	}
	return nil
}

func runLongPolicy(dir string, o longOpts, pol string) error {
	cluster, stopNodes, err := longCluster(dir, o)
	if err != nil {
		return err
	}
	defer stopNodes()
	weight := o.prefixWeight
	if pol == "noprefix" {
		weight = 0
	}
	var nodes strings.Builder
	for _, n := range cluster {
		fmt.Fprintf(&nodes, "  - {name: %s, url: http://127.0.0.1:%d, kind: vllm, models: [qwen3-8b], max_concurrency: %d}\n", n.name, n.port, n.maxConc)
	}
	cfg := fmt.Sprintf(`logging: {level: warn, access_log: false}
cache: {backend: off}
balancer:
  weights: {queue: 0.5, latency: 0.3, memory: 0.2, prefix: %g}
%s
nodes:
%s%s`, weight, o.extraBalancer, nodes.String(), o.extraConfig)
	procs := &load.Procs{}
	base, p, err := procs.StartFrontdoor(load.Frontdoor{Dir: dir, Name: "fd-long-" + pol, Config: cfg, Ready: "/readyz",
		Env: []string{"DASHSCOPE_API_KEY=sk-bench"}})
	if err != nil {
		procs.Stop()
		return err
	}
	defer procs.Terminate(p, 10*time.Second)

	turns, windows := driveUsers(base+"/v1/chat/completions", o, cluster)
	fmt.Printf("policy %s (prefix weight %g)\n\n", pol, weight)
	fmt.Println("| window | turns | TTFT p50 | TTFT p95 | TTFT p99 | stickiness | moved | load max/min | node prefix hit rate | spilled | errors |")
	fmt.Println("|---|---|---|---|---|---|---|---|---|---|---|")
	var all []longTurn
	nw := int(o.duration / o.window)
	minStick := 1.0
	for w := range nw {
		var in []longTurn
		for _, t := range turns {
			if int(t.start.Sub(windows[0].at)/o.window) == w {
				in = append(in, t)
			}
		}
		all = append(all, in...)
		s := summariseTurns(in, cluster)
		hit := windows[w+1].hitRate(windows[w])
		minStick = min(minStick, s.stick)
		fmt.Printf("| %d | %d | %s | %s | %s | %.0f%% | %d | %.2f | %.0f%% | %d | %d |\n", w+1, s.n, ms(s.p50), ms(s.p95), ms(s.p99),
			100*s.stick, s.moved, s.balance, 100*hit, s.spilled, s.errors)
	}
	s := summariseTurns(all, cluster)
	fmt.Printf("| all | %d | %s | %s | %s | %.0f%% | %d | %.2f | %.0f%% | %d | %d |\n\n", s.n, ms(s.p50), ms(s.p95), ms(s.p99),
		100*s.stick, s.moved, s.balance, 100*windows[len(windows)-1].hitRate(windows[0]), s.spilled, s.errors)
	if nw >= 4 {
		first, last := windowP95(turns, windows[0].at, 0, 2*o.window), windowP95(turns, windows[0].at, time.Duration(nw-2)*o.window, o.duration)
		fmt.Printf("TTFT p95: first two windows %s, last two %s (%.2f×); stickiness at least %.0f%% in every window; load max/min overall %.2f\n",
			ms(first), ms(last), last.Seconds()/first.Seconds(), 100*minStick, s.balance)
	}
	if m, err := load.ScrapeMetrics(base); err == nil {
		if by, ok := m.By("frontdoor_balancer_sessions_total", "outcome", nil); ok && by["new"]+by["stayed"]+by["moved"] > 0 {
			fmt.Printf("frontdoor's conversation turns: %.0f new, %.0f stayed, %.0f moved (%.1f%% of follow-ups moved)\n",
				by["new"], by["stayed"], by["moved"], 100*by["moved"]/max(1, by["stayed"]+by["moved"]))
		}
		printPredictor(m)
	}
	fmt.Println()
	return nil
}

// windowSample is the nodes' prefix-cache counters at a window's start.
type windowSample struct {
	at            time.Time
	hits, queries float64
}

func (w windowSample) hitRate(before windowSample) float64 {
	if q := w.queries - before.queries; q > 0 {
		return (w.hits - before.hits) / q
	}
	return 0
}

func sampleNodes(cluster []*node) windowSample {
	s := windowSample{at: time.Now()}
	for _, n := range cluster {
		m, err := load.ScrapeMetrics("http://" + load.Addr(n.port))
		if err != nil {
			continue
		}
		h, _ := m.Sum("vllm:prefix_cache_hits_total", nil)
		q, _ := m.Sum("vllm:prefix_cache_queries_total", nil)
		s.hits, s.queries = s.hits+h, s.queries+q
	}
	return s
}

// driveUsers runs o.users closed-loop chat users for o.duration and
// returns every turn and the node counters at each window's edge.
func driveUsers(url string, o longOpts, cluster []*node) ([]longTurn, []windowSample) {
	rng := rand.New(rand.NewPCG(o.seed, 0x10c9))
	var systems []string
	for i := range o.prompts {
		systems = append(systems, fmt.Sprintf("You are assistant number %d. ", i)+wordText(rng, o.systemTokens))
	}
	client := &http.Client{Timeout: 120 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 1024, DisableCompression: true}}
	var mu sync.Mutex
	var turns []longTurn
	windows := []windowSample{sampleNodes(cluster)}
	start := windows[0].at
	end := start.Add(o.duration)
	done := make(chan struct{})
	go func() {
		t := time.NewTicker(o.window)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				s := sampleNodes(cluster)
				mu.Lock()
				windows = append(windows, s)
				mu.Unlock()
			}
		}
	}()
	var wg sync.WaitGroup
	for u := range o.users {
		urng := rand.New(rand.NewPCG(o.seed, uint64(u)+1))
		// Staggered starts, so that conversations do not turn over in step.
		time.Sleep(time.Duration(urng.ExpFloat64() * float64(o.think) / 4))
		wg.Go(func() {
			for time.Now().Before(end) {
				msgs := []chatMsg{{"system", systems[urng.IntN(len(systems))]}}
				prev := ""
				for t := 0; t < o.turns && time.Now().Before(end); t++ {
					msgs = append(msgs, chatMsg{"user", wordText(urng, 10+urng.IntN(31))})
					r, answer := streamTurn(client, url, msgs, 16+urng.IntN(49))
					r.prev = prev
					if r.err == nil {
						prev = r.node
					}
					mu.Lock()
					turns = append(turns, r)
					mu.Unlock()
					if r.err != nil {
						break // a new conversation
					}
					msgs = append(msgs, chatMsg{"assistant", answer})
					time.Sleep(time.Duration(urng.ExpFloat64() * float64(o.think)))
				}
			}
		})
	}
	wg.Wait()
	close(done)
	mu.Lock()
	defer mu.Unlock()
	for len(windows) < int(o.duration/o.window)+1 {
		windows = append(windows, sampleNodes(cluster))
	}
	return turns, windows
}

// streamTurn streams one chat turn and returns it and the answer's text;
// its TTFT is the first content.
func streamTurn(client *http.Client, url string, msgs []chatMsg, maxTokens int) (r longTurn, answer string) {
	c := streamChat(client, url, msgs, maxTokens, true)
	r = longTurn{start: c.start, ttft: c.ttft, node: c.node, err: c.err, promptToks: c.promptTokens}
	r.spilled = strings.HasPrefix(r.node, "spillover:")
	return r, c.answer
}

// chatStream is one streamed chat turn as the client saw it.
type chatStream struct {
	start        time.Time
	ttft         time.Duration // to the first event, or the first content
	end          time.Time
	node         string // X-Upstream
	answer       string
	promptTokens int // from the usage chunk
	err          error
}

// streamChat streams one chat turn (with usage) and reads it to the end.
// TTFT runs to the first content when firstContent is set (an engine may
// send the role first, at once), else to the first event.
func streamChat(client *http.Client, url string, msgs []chatMsg, maxTokens int, firstContent bool) chatStream {
	body, _ := json.Marshal(map[string]any{"model": "qwen3-8b", "messages": msgs, "max_tokens": maxTokens, "stream": true,
		"stream_options": map[string]any{"include_usage": true}})
	return streamBody(client, url, body, firstContent)
}

// streamBody is streamChat with the request body made.
func streamBody(client *http.Client, url string, body []byte, firstContent bool) (c chatStream) {
	c.start = time.Now()
	defer func() { c.end = time.Now() }()
	req, _ := http.NewRequestWithContext(context.Background(), http.MethodPost, url, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		c.err = err
		return c
	}
	defer resp.Body.Close()
	c.node = resp.Header.Get("X-Upstream")
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 300))
		c.err = fmt.Errorf("status %d: %s", resp.StatusCode, b)
		return c
	}
	var sb strings.Builder
	br := bufio.NewReader(resp.Body)
	for {
		line, err := br.ReadBytes('\n')
		if data, ok := bytes.CutPrefix(bytes.TrimSpace(line), []byte("data: ")); ok {
			if string(data) == "[DONE]" {
				if c.ttft == 0 {
					c.ttft = time.Since(c.start)
				}
				c.answer = sb.String()
				return c
			}
			if c.ttft == 0 && !firstContent {
				c.ttft = time.Since(c.start)
			}
			var chunk struct {
				Choices []struct {
					Delta struct {
						Content string `json:"content"`
					} `json:"delta"`
				} `json:"choices"`
				Usage *struct {
					PromptTokens int `json:"prompt_tokens"`
				} `json:"usage"`
			}
			if json.Unmarshal(data, &chunk) == nil {
				if len(chunk.Choices) > 0 && chunk.Choices[0].Delta.Content != "" {
					if c.ttft == 0 {
						c.ttft = time.Since(c.start)
					}
					sb.WriteString(chunk.Choices[0].Delta.Content)
				}
				if chunk.Usage != nil {
					c.promptTokens = chunk.Usage.PromptTokens
				}
			}
		}
		if err != nil {
			c.err = fmt.Errorf("stream ended without [DONE]: %w", err)
			return c
		}
	}
}

type turnSummary struct {
	n, errors, moved, spilled int
	p50, p95, p99             time.Duration
	stick, balance            float64
}

// summariseTurns reduces a window's turns. Stickiness is the share of
// follow-up turns answered locally on the node of their previous turn;
// load max/min is over the nodes' shares of local turns.
func summariseTurns(ts []longTurn, cluster []*node) turnSummary {
	var s turnSummary
	var ttft []time.Duration
	byNode := map[string]int{}
	follow := 0
	for _, t := range ts {
		if t.err != nil {
			s.errors++
			continue
		}
		s.n++
		ttft = append(ttft, t.ttft)
		if t.spilled {
			s.spilled++
			continue
		}
		byNode[t.node]++
		if t.prev != "" && !strings.HasPrefix(t.prev, "spillover:") {
			follow++
			if t.prev != t.node {
				s.moved++
			}
		}
	}
	if follow > 0 {
		s.stick = 1 - float64(s.moved)/float64(follow)
	}
	lo, hi := 1<<62, 0
	for _, n := range cluster {
		lo, hi = min(lo, byNode[n.name]), max(hi, byNode[n.name])
	}
	s.balance = float64(hi) / float64(max(lo, 1))
	s.p50, s.p95, s.p99 = quantile(ttft, 0.5), quantile(ttft, 0.95), quantile(ttft, 0.99)
	return s
}

// windowP95 is the TTFT p95 of the turns started in [from, to) after t0.
func windowP95(ts []longTurn, t0 time.Time, from, to time.Duration) time.Duration {
	var d []time.Duration
	for _, t := range ts {
		if at := t.start.Sub(t0); t.err == nil && at >= from && at < to {
			d = append(d, t.ttft)
		}
	}
	return quantile(d, 0.95)
}

// printPredictor reports frontdoor's TTFT predictor error, when it has one.
func printPredictor(m load.Metrics) {
	bs, ok := m.Buckets("frontdoor_ttft_prediction_error_seconds", nil)
	if !ok {
		return
	}
	med, _, _ := load.BucketQuantile(bs, 0.5)
	p90, _, _ := load.BucketQuantile(bs, 0.9)
	fmt.Printf("TTFT predictor: median absolute error %.0f ms, p90 %.0f ms (frontdoor_ttft_prediction_error_seconds)\n", med*1000, p90*1000)
}
