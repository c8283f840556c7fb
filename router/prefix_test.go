package router

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"frontdoor/balancer"
	sim "frontdoor/internal/gpusim"
	"frontdoor/internal/testenv"
)

// chatTurns is a chat body: a system prompt, then alternating user and
// assistant turns.
func chatTurns(system string, turns ...string) string {
	type msg struct {
		Role    string `json:"role"`
		Content string `json:"content"`
	}
	msgs := []msg{{"system", system}}
	for i, t := range turns {
		role := "user"
		if i%2 == 1 {
			role = "assistant"
		}
		msgs = append(msgs, msg{role, t})
	}
	b, _ := json.Marshal(map[string]any{"model": "qwen3-8b", "max_tokens": 4, "messages": msgs})
	return string(b)
}

// conversation is conversation c's messages at its turn: questions and
// the answers between them.
func conversation(c, turn int) []string {
	var turns []string
	for i := 1; i <= turn; i++ {
		turns = append(turns, fmt.Sprintf("question %d of conversation %d", i, c))
		if i < turn {
			turns = append(turns, fmt.Sprintf("answer %d", i))
		}
	}
	return turns
}

// TestPrefixRouting: with the prefix weight, every turn of a conversation
// goes where its earlier turns went (the node whose prefix cache holds
// them), and /admin/nodes shows the nodes' own prefix-cache hit rate.
func TestPrefixRouting(t *testing.T) {
	var sims []*sim.Server
	for range 3 {
		sims = append(sims, testenv.GPUSim(t, func(c *sim.Config) { c.PrefixCache = true }))
	}
	cfg := testConfig(sims...)
	cfg.Balancer.Weights.Prefix = 0.5
	cfg.Balancer.ScrapeInterval, cfg.Balancer.StaleAfter = 100e6, 500e6
	gw := startGateway(t, cfg)

	where := map[string]string{} // system prompt -> node of turn 1
	for turn := 1; turn <= 3; turn++ {
		for c := range 6 {
			system := fmt.Sprintf("system prompt %d: ", c) + strings.Repeat(fmt.Sprintf("rule %d applies. ", c), 300)
			resp, body := post(t, gw.URL+"/v1/chat/completions", chatTurns(system, conversation(c, turn)...))
			if resp.StatusCode != 200 {
				t.Fatalf("status %d: %s", resp.StatusCode, body)
			}
			node := resp.Header.Get("X-Upstream")
			if turn == 1 {
				where[system] = node
			} else if node != where[system] {
				t.Fatalf("conversation %d turn %d went to %s, its turn 1 to %s", c, turn, node, where[system])
			}
		}
	}
	// 12 of the 18 requests repeat a prefix their node holds.
	var nodes []balancer.NodeStatus
	testenv.Eventually(t, 5*time.Second, func() bool {
		resp, err := httpClient.Get(gw.URL + "/admin/nodes")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		if resp.StatusCode != 200 || json.NewDecoder(resp.Body).Decode(&nodes) != nil {
			return false
		}
		sum := 0.0
		for _, n := range nodes {
			if n.PrefixIndex.Blocks > 0 && (n.Metrics == nil || n.Metrics.PrefixCacheHitRate == nil) {
				return false
			}
			if n.Metrics != nil && n.Metrics.PrefixCacheHitRate != nil {
				sum += *n.Metrics.PrefixCacheHitRate
			}
		}
		// A scrape taken before the nodes counted the hits reports 0:
		// wait for one after.
		return sum > 0
	}, "no node reports prefix-cache hits in /admin/nodes")
	// The six conversations' turns, as /status counts them.
	resp, err := httpClient.Get(gw.URL + "/status")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var st struct {
		Sessions *balancer.SessionStatus `json:"sessions"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil || st.Sessions == nil {
		t.Fatalf("/status sessions: %v, %+v", err, st)
	}
	if s := st.Sessions; s.Tracked != 6 || s.Turns["new"] != 6 || s.Turns["stayed"] != 12 || s.Turns["moved"] != 0 {
		t.Fatalf("/status sessions %+v, want 6 tracked, 6 new, 12 stayed", *s)
	}
}

// TestPrefixModelOnLLMD runs conversations through two of llm-d's vLLM
// simulators (an engine frontdoor's authors did not write) with a prefix
// KV cache: the prefix index takes each node's capacity from its
// cache_config_info, every follow-up turn stays on its conversation's
// node, and once the nodes report prefix-cache hits the index compares
// its prediction with them (/admin/nodes prefix_index).
func TestPrefixModelOnLLMD(t *testing.T) {
	args := []string{"--enable-kvcache", "--kv-cache-size", "512", "--block-size", "16", "--max-num-seqs", "8",
		"--max-model-len", "8192", "--time-to-first-token", "2ms", "--inter-token-latency", "1ms", "--zmq-endpoint", ""}
	t.Setenv("POD_IP", "127.0.0.1")
	a, b := testenv.LLMDSim(t, "qwen3-8b", args...), testenv.LLMDSim(t, "qwen3-8b", args...)
	cfg := testConfig()
	cfg.Nodes = []balancer.NodeConfig{
		{Name: "llmd-a", URL: a, Kind: "vllm", Models: []string{"qwen3-8b"}, MaxConcurrency: 8, Weight: 1},
		{Name: "llmd-b", URL: b, Kind: "vllm", Models: []string{"qwen3-8b"}, MaxConcurrency: 8, Weight: 1},
	}
	cfg.Balancer.ScrapeInterval, cfg.Balancer.StaleAfter = 100e6, 500e6
	gw := startGateway(t, cfg)
	nodes := func() []balancer.NodeStatus {
		resp, err := httpClient.Get(gw.URL + "/admin/nodes")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var ns []balancer.NodeStatus
		if err := json.NewDecoder(resp.Body).Decode(&ns); err != nil {
			t.Fatal(err)
		}
		return ns
	}
	testenv.Eventually(t, 5*time.Second, func() bool {
		for _, n := range nodes() {
			if n.PrefixIndex.CapacityTokens != 512*16 {
				return false
			}
		}
		return true
	}, "the prefix index did not take the nodes' capacity from cache_config_info")

	system := "You answer questions about rivers. " + strings.Repeat("Rivers flow to the sea and carry silt. ", 60)
	for turn := 1; turn <= 4; turn++ {
		for c := range 4 {
			resp, body := post(t, gw.URL+"/v1/chat/completions", chatTurns(system, conversation(c, turn)...))
			if resp.StatusCode != 200 {
				t.Fatalf("status %d: %s", resp.StatusCode, body)
			}
		}
		time.Sleep(150 * time.Millisecond) // a scrape between turns
	}
	resp, err := httpClient.Get(gw.URL + "/status")
	if err != nil {
		t.Fatal(err)
	}
	var st struct {
		Sessions *balancer.SessionStatus `json:"sessions"`
	}
	err = json.NewDecoder(resp.Body).Decode(&st)
	resp.Body.Close()
	if err != nil || st.Sessions == nil || st.Sessions.Turns["new"] != 4 || st.Sessions.Turns["stayed"] != 12 {
		t.Fatalf("/status sessions %+v (%v), want 4 new and 12 stayed", st.Sessions, err)
	}
	testenv.Eventually(t, 5*time.Second, func() bool {
		for _, n := range nodes() {
			if n.PrefixIndex.Blocks > 0 && n.PrefixIndex.MeasuredHitRate == nil {
				return false
			}
		}
		return true
	}, "the prefix index never compared its prediction with the nodes' measured hit rate")
}
