package balancer

import (
	"fmt"
	"math"
	"strings"
	"testing"
	"time"
)

// chat builds a request's prefix from role/content pairs.
func chat(t testing.TB, p *Pool, msgs ...string) *Prefix {
	t.Helper()
	h := p.PrefixHasher()
	if h == nil {
		t.Fatal("PrefixHasher is nil with a prefix weight")
	}
	for i := 0; i+1 < len(msgs); i += 2 {
		h.Message([]byte(msgs[i]))
		h.Write([]byte(msgs[i+1]))
	}
	return h.Prefix()
}

func words(seed string, tokens int) string {
	var b strings.Builder
	for i := 0; b.Len() < tokens*bytesPerToken; i++ {
		fmt.Fprintf(&b, "%s-%d ", seed, i)
	}
	return b.String()
}

// nodesWith is testNodes with max_concurrency maxConc.
func nodesWith(n, maxConc int) []NodeConfig {
	nodes := testNodes(n)
	for i := range nodes {
		nodes[i].MaxConcurrency = maxConc
	}
	return nodes
}

func withPrefix(c *Config) { c.Weights.Prefix = 3 }

// TestPrefixHashes: a later turn carries the earlier turn's hashes as its
// prefix; a different system prompt or role shares none.
func TestPrefixHashes(t *testing.T) {
	p, _ := newTestPool(t, withPrefix, testNodes(1))
	sys := words("sys", 1000)
	turn1 := chat(t, p, "system", sys, "user", "first question")
	turn2 := chat(t, p, "system", sys, "user", "first question", "assistant", "an answer", "user", "second question")
	if n := turn1.Blocks(); n < 1000/64 {
		t.Fatalf("turn 1 has %d blocks, want at least one per 64 tokens", n)
	}
	for i, b := range turn1.blocks {
		if turn2.blocks[i] != b {
			t.Fatalf("turn 2 block %d = %+v, want turn 1's %+v", i, turn2.blocks[i], b)
		}
	}
	if turn2.Tokens() <= turn1.Tokens() || turn1.Tokens() < 1000 {
		t.Errorf("tokens: turn 1 %d, turn 2 %d", turn1.Tokens(), turn2.Tokens())
	}
	other := chat(t, p, "system", words("other", 1000), "user", "first question")
	asUser := chat(t, p, "user", sys, "user", "first question")
	if other.blocks[0] == turn1.blocks[0] || asUser.blocks[0] == turn1.blocks[0] {
		t.Error("a different system prompt, or the same text under another role, shares the first hash")
	}
	// The message boundary is a hash of its own: "ab"+"c" is not "a"+"bc".
	if chat(t, p, "user", "ab", "user", "c").blocks[0] == chat(t, p, "user", "a", "user", "bc").blocks[0] {
		t.Error("message boundaries are not part of the hash")
	}
	huge := chat(t, p, "user", words("huge", 200_000))
	if huge.Blocks() != maxPrefixBlocks || huge.Tokens() < 200_000 {
		t.Errorf("a huge prompt: %d blocks (want the cap %d), %d tokens", huge.Blocks(), maxPrefixBlocks, huge.Tokens())
	}
}

// TestPrefixOffMeansNoHashing: with the prefix weight 0, or another
// policy, the router gets no hasher and Routed does nothing.
func TestPrefixOffMeansNoHashing(t *testing.T) {
	p, _ := newTestPool(t, func(c *Config) { c.Weights.Prefix = 0 }, testNodes(2))
	if p.PrefixHasher() != nil {
		t.Fatal("a hasher with the prefix weight 0")
	}
	p.Routed(p.Nodes()[0], nil)
	q, _ := newTestPool(t, func(c *Config) { withPrefix(c); c.Policy = "least_inflight" }, testNodes(2))
	if q.PrefixHasher() != nil {
		t.Fatal("a hasher under least_inflight")
	}
}

// TestPrefixScorer is the scorer's table: which node comes first given
// what was routed where and each node's load.
func TestPrefixScorer(t *testing.T) {
	sys := words("system", 2000)
	other := words("other", 2000)
	type routed struct {
		node string
		msgs []string
	}
	cases := []struct {
		name     string
		mutate   func(*Config)
		history  []routed
		inflight map[string]int
		request  []string
		want     string
		share    map[string]float64 // approximate prefix parts, ±0.05
	}{
		{
			name:    "the node holding the prefix wins at equal load",
			history: []routed{{"b", []string{"system", sys, "user", "q1"}}, {"c", []string{"system", other, "user", "q1"}}},
			request: []string{"system", sys, "user", "q2"},
			want:    "b", share: map[string]float64{"a": 0, "b": 0.99, "c": 0},
		},
		{
			name:     "slightly busier with the prefix still wins",
			history:  []routed{{"b", []string{"system", sys, "user", "q1"}}},
			inflight: map[string]int{"a": 5, "b": 7, "c": 5},
			request:  []string{"system", sys, "user", "q2"},
			want:     "b",
		},
		{
			name:     "a node with the prefix but twice the others' queue loses",
			history:  []routed{{"b", []string{"system", sys, "user", "q1"}}},
			inflight: map[string]int{"a": 6, "b": 12, "c": 6},
			request:  []string{"system", sys, "user", "q2"},
			want:     "a|c", share: map[string]float64{"b": 0},
		},
		{
			name:     "without the guard the same node would have won",
			mutate:   func(c *Config) { c.Prefix.BalanceRel = 100 },
			history:  []routed{{"b", []string{"system", sys, "user", "q1"}}},
			inflight: map[string]int{"a": 6, "b": 12, "c": 6},
			request:  []string{"system", sys, "user", "q2"},
			want:     "b",
		},
		{
			name:     "the guard needs the absolute gap too: 3 against 0 is no pile-up",
			history:  []routed{{"b", []string{"system", sys, "user", "q1"}}},
			inflight: map[string]int{"a": 0, "b": 3, "c": 0},
			request:  []string{"system", sys, "user", "q2"},
			want:     "b",
		},
		{
			name:     "the guard needs the ratio too: 12 against 8 is not 1.5 times",
			history:  []routed{{"b", []string{"system", sys, "user", "q1"}}},
			inflight: map[string]int{"a": 8, "b": 12, "c": 8},
			request:  []string{"system", sys, "user", "q2"},
			want:     "b",
		},
		{
			name: "turn 3 follows the longest shared conversation",
			history: []routed{
				{"a", []string{"system", sys}},
				{"c", []string{"system", sys, "user", words("q1", 500), "assistant", words("a1", 500)}},
			},
			request: []string{"system", sys, "user", words("q1", 500), "assistant", words("a1", 500), "user", "q2"},
			want:    "c", share: map[string]float64{"a": 0.67, "c": 0.99},
		},
		{
			name: "aged out: past its capacity in new tokens a node no longer holds it",
			mutate: func(c *Config) {
				c.Prefix.CapacityTokens = 4000
			},
			history: []routed{
				{"b", []string{"system", sys, "user", "q1"}},
				{"b", []string{"system", other, "user", "q1"}},
				{"b", []string{"system", words("third", 2000), "user", "q1"}},
				{"a", []string{"system", sys, "user", "q1"}},
			},
			request: []string{"system", sys, "user", "q2"},
			want:    "a", share: map[string]float64{"b": 0},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p, _ := newTestPool(t, func(c *Config) {
				withPrefix(c)
				c.Weights.Latency, c.Weights.Memory = 0, 0 // unknown anyway: keep the sums readable
				if tc.mutate != nil {
					tc.mutate(c)
				}
			}, nodesWith(3, 20))
			for _, r := range tc.history {
				p.Routed(p.Node(r.node), chat(t, p, r.msgs...))
			}
			for name, k := range tc.inflight {
				acquire(t, p.Node(name), k)
			}
			req := chat(t, p, tc.request...)
			for range 20 { // ties break at random: the answer must not
				got, _ := p.PickWith("m", Hints{Prefix: req})
				if !strings.Contains("|"+tc.want+"|", "|"+got[0].Name()+"|") {
					t.Fatalf("first pick %s (order %v), want %s", got[0].Name(), names(got), tc.want)
				}
			}
			now := p.nowNanos()
			minLoad := math.Inf(1)
			for _, n := range p.Nodes() {
				minLoad = min(minLoad, p.load(n, now))
			}
			for name, want := range tc.share {
				s := p.score(p.Node(name), now, factors{prefix: req, minLoad: minLoad})
				if math.Abs(s.Prefix-want) > 0.05 {
					t.Errorf("%s: prefix part %.3f, want about %.2f", name, s.Prefix, want)
				}
			}
		})
	}
}

// TestPrefixIndexBounded: the index never holds more than maxIndexEntries
// hashes, and what it keeps is the most recent.
func TestPrefixIndexBounded(t *testing.T) {
	var ix prefixIndex
	const capacity = 1 << 40 // nothing ages out by capacity
	for i := range maxIndexEntries + 5000 {
		ix.insert([]prefixBlock{{hash: uint64(i) + 1, end: 64}}, capacity)
	}
	if n := ix.size(); n > maxIndexEntries {
		t.Fatalf("index holds %d entries, bound %d", n, maxIndexEntries)
	}
	last := []prefixBlock{{hash: maxIndexEntries + 5000, end: 64}}
	if ix.match(last, capacity) != 64 {
		t.Fatal("the newest entry was pruned")
	}
	if ix.match([]prefixBlock{{hash: 1, end: 64}}, capacity) != 0 {
		t.Fatal("the oldest entry survived pruning")
	}
}

// TestPrefixCapacityFromEngine: the index ages out by the capacity the
// engine publishes, and /admin/nodes shows it with the engine's hit rate.
func TestPrefixCapacityFromEngine(t *testing.T) {
	p, _ := newTestPool(t, withPrefix, testNodes(1))
	n := p.Nodes()[0]
	feed(p, n, string(fixture(t, "vllm_v1.txt")))
	if got := p.capacityTokens(n); got != 27854*16 {
		t.Fatalf("capacity = %d, want num_gpu_blocks × block_size = %d", got, 27854*16)
	}
	r, ok := n.PrefixCacheHitRate()
	if !ok || math.Abs(r-601120.0/918432.0) > 1e-9 {
		t.Fatalf("hit rate from the first scrape = %v %v, want hits/queries since start", r, ok)
	}
	// The next scrape: 1000 more queried tokens, 250 more hits.
	body := strings.Replace(string(fixture(t, "vllm_v1.txt")), "} 918432.0", "} 919432.0", 1)
	body = strings.Replace(body, "} 601120.0", "} 601370.0", 1)
	feed(p, n, body)
	if r, _ = n.PrefixCacheHitRate(); math.Abs(r-0.25) > 1e-9 {
		t.Fatalf("hit rate over the interval = %v, want 0.25", r)
	}
	st := p.Status()[0]
	if st.Metrics == nil || st.Metrics.PrefixCacheHitRate == nil || *st.Metrics.PrefixCacheHitRate != r {
		t.Fatalf("status metrics %+v, want the hit rate", st.Metrics)
	}
	if st.PrefixIndex.CapacityTokens != 27854*16 {
		t.Errorf("status prefix index %+v", st.PrefixIndex)
	}
	// An engine without the counters shows none.
	q, _ := newTestPool(t, withPrefix, testNodes(1))
	feed(q, q.Nodes()[0], vllmText(1, 0, 0.1))
	if st := q.Status()[0]; st.Metrics.PrefixCacheHitRate != nil || st.PrefixIndex.CapacityTokens != 65536 {
		t.Errorf("without counters: %+v %+v", st.Metrics, st.PrefixIndex)
	}
}

func TestLabelNumber(t *testing.T) {
	line := []byte(`vllm:cache_config_info{block_size="16",num_gpu_blocks_override="None",num_gpu_blocks="7821",x="1"} 1.0`)
	cases := map[string]float64{"block_size": 16, "num_gpu_blocks": 7821, "num_gpu_blocks_override": 0, "missing": 0, "x": 1}
	for key, want := range cases {
		if got := labelNumber(line, key); got != want {
			t.Errorf("%s = %v, want %v", key, got, want)
		}
	}
}

// BenchmarkPickPrefix measures the prefix scorer's hot-path cost on 4
// nodes whose indexes hold 50 conversations: hashing a request (a 2k-token
// system prompt and 4 turns, about 9 KB), Pick with it, and Routed,
// against Pick with the prefix weight 0 (no hashing).
func BenchmarkPickPrefix(b *testing.B) {
	sys := words("system", 2000)
	msgs := []string{"system", sys}
	for i := range 4 {
		msgs = append(msgs, "user", words(fmt.Sprint("q", i), 60), "assistant", words(fmt.Sprint("a", i), 100))
	}
	msgs = append(msgs, "user", "last question")
	raw := make([][]byte, len(msgs)) // the router hands over fastjson's bytes, no copies
	for i, m := range msgs {
		raw[i] = []byte(m)
	}
	setup := func(b *testing.B, weight float64) *Pool {
		p, _ := newTestPool(b, func(c *Config) { c.Weights.Prefix = weight }, testNodes(4))
		for _, n := range p.Nodes() {
			feed(p, n, vllmText(2, 0, 0.3))
			p.Report(n, OutcomeSuccess, 80*time.Millisecond)
		}
		if weight > 0 {
			for i := range 50 {
				p.Routed(p.Nodes()[i%4], chat(b, p, "system", words(fmt.Sprint("s", i%10), 2000), "user", fmt.Sprint("conversation ", i)))
			}
		}
		return p
	}
	hash := func(p *Pool) *Prefix {
		h := p.PrefixHasher()
		if h == nil {
			return nil
		}
		for i := 0; i+1 < len(raw); i += 2 {
			h.Message(raw[i])
			h.Write(raw[i+1])
		}
		return h.Prefix()
	}
	b.Run("weight=0/pick", func(b *testing.B) {
		p := setup(b, 0)
		b.ReportAllocs()
		for b.Loop() {
			p.PickWith("m", Hints{Prefix: hash(p)})
		}
	})
	b.Run("weight=0.5/hash", func(b *testing.B) {
		p := setup(b, 0.5)
		b.ReportAllocs()
		for b.Loop() {
			hash(p)
		}
	})
	b.Run("weight=0.5/pick", func(b *testing.B) {
		p := setup(b, 0.5)
		px := hash(p)
		b.ReportAllocs()
		for b.Loop() {
			p.PickWith("m", Hints{Prefix: px})
		}
	})
	b.Run("weight=0.5/hash+pick+routed", func(b *testing.B) {
		p := setup(b, 0.5)
		b.ReportAllocs()
		for b.Loop() {
			px := hash(p)
			out, _ := p.PickWith("m", Hints{Prefix: px})
			p.Routed(out[0], px)
		}
	})
}

// FuzzParseMetrics: any exposition parses without panicking, and what it
// yields is in range (the prefix counters and cache_config_info labels
// included).
func FuzzParseMetrics(f *testing.F) {
	for _, name := range []string{"vllm_v1.txt", "vllm_legacy.txt", "sglang.txt", "tgi.txt"} {
		f.Add(fixture(f, name))
	}
	f.Add([]byte(`vllm:cache_config_info{block_size="16",num_gpu_blocks="1e400"} 1`))
	f.Fuzz(func(t *testing.T, body []byte) {
		m := parseMetrics(kindVLLM, body)
		if !math.IsNaN(m.kv) && (m.kv < 0 || m.kv > 1) {
			t.Fatalf("kv %v", m.kv)
		}
		if m.kvCapacity < 0 || math.IsNaN(m.kvCapacity) {
			t.Fatalf("capacity %v", m.kvCapacity)
		}
		var n Node
		n.notePrefixHits(nil, &m)
		if r, ok := n.PrefixCacheHitRate(); ok && (r < 0 || r > 1) {
			t.Fatalf("hit rate %v", r)
		}
	})
}
