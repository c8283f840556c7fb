package balancer

import (
	"fmt"
	"frontdoor/internal/testenv"
	"math"
	"slices"
	"testing"
	"time"
)

func TestQueueScore(t *testing.T) {
	snap := func(running, waiting float64, inflightThen int64) *engineMetrics {
		return &engineMetrics{running: running, waiting: waiting, inflight: inflightThen, kv: math.NaN()}
	}
	for _, tc := range []struct {
		name     string
		inflight int64
		maxConc  int
		slots    float64
		m        *engineMetrics
		want     float64
	}{
		{"unknown, idle: neutral, below known-idle", 0, 10, 0, nil, 0.5},
		{"unknown, half full: own count, halved", 5, 10, 0, nil, 0.5 * (1 - 0.75*0.25)},
		{"unknown, full", 10, 10, 0, nil, 0.5 * 0.25},
		{"missing running counts as unknown", 0, 10, 0, snap(math.NaN(), 0, 0), 0.5},
		{"known idle", 0, 10, 0, snap(0, 0, 0), 1},
		{"known half full", 5, 10, 0, snap(5, 0, 5), 1 - 0.75*0.25},
		{"other gateways' load counts", 0, 10, 0, snap(5, 0, 0), 1 - 0.75*0.25},
		{"full batch, 2 waiting", 0, 10, 0, snap(10, 2, 0), 0.25 / 3},
		// Looked idle at the scrape, but we sent 10 since: not idle.
		{"burst since the scrape", 10, 10, 0, snap(0, 0, 0), 0.25},
		{"burst beyond the engine's batch size queues", 8, 10, 4, snap(0, 0, 0), 0.25 / 5},
		{"engine already queueing: ours queue too", 3, 10, 0, snap(10, 2, 0), 0.25 / 6},
		{"ours finished since: the queue drains", 0, 10, 0, snap(10, 2, 2), 0.25},
		{"learned batch size above the cap is ignored", 5, 10, 16, snap(5, 0, 5), 1 - 0.75*0.25},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := queueScore(tc.inflight, tc.maxConc, tc.slots, tc.m); !near(got, tc.want) {
				t.Fatalf("queueScore = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestLatencyScore(t *testing.T) {
	for _, tc := range []struct {
		name       string
		ttft, best float64
		known      bool
		want       float64
	}{
		{"fastest", 0.05, 0.05, true, 1},
		{"twice as slow", 0.125, 0.05, true, 0.5},
		{"six times as slow", 0.3, 0.05, true, 0.075 / 0.325},
		{"noise-level differences hardly count", 0.002, 0.001, true, 0.026 / 0.027},
		{"unknown", 0, 0.05, false, 0.5},
		{"no known peer", 0.1, 0, true, 0.5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := latencyScore(tc.ttft, tc.known, tc.best); !near(got, tc.want) {
				t.Fatalf("latencyScore = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestMemoryScore(t *testing.T) {
	for _, tc := range []struct {
		file, kind string
		want       float64
	}{
		{"vllm_v1.txt", "vllm", 1 - 0.4375},
		{"vllm_legacy.txt", "vllm", 1 - 0.2113},
		{"tgi.txt", "tgi", 0.125},
		{"tgi_no_total.txt", "tgi", unknownScore},
		{"sglang.txt", "sglang", 0.29},
	} {
		t.Run(tc.file, func(t *testing.T) {
			m := parseMetrics(parseKind(tc.kind), fixture(t, tc.file))
			if got := memoryScore(&m); !near(got, tc.want) {
				t.Fatalf("memoryScore = %v, want %v", got, tc.want)
			}
		})
	}
	if memoryScore(nil) != unknownScore {
		t.Fatal("no scrape must score unknown")
	}
}

// TestScoreStaleIsUnknown: a scrape older than stale_after scores exactly
// as no scrape at all, and a known-idle node beats it.
func TestScoreStaleIsUnknown(t *testing.T) {
	p, clk := newTestPool(t, nil, testNodes(2))
	a, b := p.Nodes()[0], p.Nodes()[1]
	feed(p, a, vllmText(0, 0, 0))
	clk.Advance(4 * time.Second)
	feed(p, b, vllmText(0, 0, 0))
	now := p.nowNanos()
	if sa, sb := p.score(a, now, factors{}), p.score(b, now, factors{}); sa.Total != sb.Total || !near(sa.Total, 1*0.5+0.5*0.3+1*0.2) {
		t.Fatalf("fresh idle nodes: %+v %+v", sa, sb)
	}
	clk.Advance(2 * time.Second) // a's scrape is now 6s old, b's 2s
	now = p.nowNanos()
	sa, sb := p.score(a, now, factors{}), p.score(b, now, factors{})
	if sa.Queue != unknownScore || sa.Memory != unknownScore {
		t.Fatalf("stale node scored %+v, want unknown parts", sa)
	}
	if sa.Total >= sb.Total {
		t.Fatalf("stale (unknown) node %v scored at least the known-idle one %v", sa.Total, sb.Total)
	}
	if got, _ := p.Pick("m", 0); got[0] != b {
		t.Fatalf("pick order %v, want the known-idle node first", names(got))
	}
}

// TestLatencyEWMA: the TTFT average follows reported first-byte times and
// is forgotten after 10 × stale_after without samples.
func TestLatencyEWMA(t *testing.T) {
	p, clk := newTestPool(t, nil, testNodes(2))
	a, b := p.Nodes()[0], p.Nodes()[1]
	for i := 0; i < 50; i++ {
		p.Report(a, OutcomeSuccess, 50*time.Millisecond)
		p.Report(b, OutcomeSuccess, 300*time.Millisecond)
	}
	p.Report(a, OutcomeSuccess, 0) // unknown first byte: no sample
	now := p.nowNanos()
	best := p.bestTTFT(p.Nodes(), now)
	if !near(best, 0.05) {
		t.Fatalf("best TTFT %v", best)
	}
	if sb := p.score(b, now, factors{bestTTFT: best}); math.Abs(sb.Latency-0.075/0.325) > 1e-6 {
		t.Fatalf("slow node latency score %v, want 0.075/0.325", sb.Latency)
	}
	if got, _ := p.Pick("m", 0); got[0] != a {
		t.Fatalf("order %v, want the fast node first", names(got))
	}
	// One slow sample moves the average by alpha, not all the way.
	p.Report(a, OutcomeSuccess, 550*time.Millisecond)
	if v, _, _ := a.ttft.get(); !near(v, 0.8*0.05+0.2*0.55) {
		t.Fatalf("ewma %v", v)
	}
	clk.Advance(51 * time.Second)
	if _, ok := p.ttftOf(a, p.nowNanos()); ok {
		t.Fatal("TTFT average still known after 10 × stale_after without samples")
	}
}

// TestPickFilters: each filter removes a node; the rest stay.
func TestPickFilters(t *testing.T) {
	for _, tc := range []struct {
		name  string
		setup func(t *testing.T, p *Pool, c *testenv.Clock, n *Node)
		want  verdict
	}{
		{"healthy node is a candidate", func(*testing.T, *Pool, *testenv.Clock, *Node) {}, admitOK},
		{"unhealthy", func(_ *testing.T, _ *Pool, _ *testenv.Clock, n *Node) { n.healthy.Store(false) }, admitUnhealthy},
		{"drained", func(t *testing.T, p *Pool, _ *testenv.Clock, n *Node) {
			if err := p.Drain(n.Name()); err != nil {
				t.Fatal(err)
			}
		}, admitDrained},
		{"at max_concurrency", func(t *testing.T, _ *Pool, _ *testenv.Clock, n *Node) { acquire(t, n, 10) }, admitFull},
		{"breaker open", func(t *testing.T, p *Pool, _ *testenv.Clock, n *Node) { trip(t, p, n) }, admitBreakerOpen},
		{"half-open with its trial slot taken", func(t *testing.T, p *Pool, c *testenv.Clock, n *Node) {
			trip(t, p, n)
			c.Advance(10 * time.Second)
			acquire(t, n, 1) // the one trial request
		}, admitBreakerOpen},
		{"half-open with a trial slot free", func(t *testing.T, p *Pool, c *testenv.Clock, n *Node) {
			trip(t, p, n)
			c.Advance(10 * time.Second)
		}, admitOK},
		{"ejected", func(_ *testing.T, p *Pool, _ *testenv.Clock, n *Node) {
			feed(p, n, vllmText(4, 0, 0.97))
			feed(p, n, vllmText(4, 0, 0.97))
		}, admitEjected},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, clk := newTestPool(t, nil, testNodes(3))
			n := p.Nodes()[1]
			tc.setup(t, p, clk, n)
			if v := n.admit(p.nowNanos()); v != tc.want {
				t.Fatalf("verdict %v, want %v", v, tc.want)
			}
			got, served := p.Pick("m", 0)
			if !served {
				t.Fatal("served = false")
			}
			if slices.Contains(got, n) != (tc.want == admitOK) {
				t.Fatalf("candidates %v; node b included: %v, want %v", names(got), slices.Contains(got, n), tc.want == admitOK)
			}
			if !slices.Contains(got, p.Nodes()[2]) {
				t.Fatalf("candidates %v lost an unaffected node", names(got))
			}
		})
	}
}

// trip opens n's breaker with 5 failures. A request stays in flight
// meanwhile, so passive health (a failure on an idle node) stays out of it.
func trip(t *testing.T, p *Pool, n *Node) {
	t.Helper()
	acquire(t, n, 1)
	for i := 0; i < 5; i++ {
		p.Report(n, OutcomeFailure, 0)
	}
	n.Release()
	if !n.Healthy() || n.brState.Load() != breakerOpen {
		t.Fatalf("trip: healthy=%v breaker=%v", n.Healthy(), n.brState.Load())
	}
}

func TestPickUnknownModel(t *testing.T) {
	p, _ := newTestPool(t, nil, testNodes(2))
	if got, served := p.Pick("nope", 0); served || got != nil {
		t.Fatalf("Pick(unknown) = %v, %v", got, served)
	}
	nodes := testNodes(2)
	nodes[1].Models = []string{"other"}
	p, _ = newTestPool(t, nil, nodes)
	if got, _ := p.Pick("other", 0); len(got) != 1 || got[0].Name() != "b" {
		t.Fatalf("serves filter: %v", names(got))
	}
}

// TestPickEjectedFallback: ejected nodes are used only when nothing else
// could take the request for a reason other than load.
func TestPickEjectedFallback(t *testing.T) {
	p, _ := newTestPool(t, nil, testNodes(2))
	a, b := p.Nodes()[0], p.Nodes()[1]
	for i := 0; i < 2; i++ {
		feed(p, a, vllmText(4, 0, 0.97))
	}
	if got, _ := p.Pick("m", 0); len(got) != 1 || got[0] != b {
		t.Fatalf("with b usable: %v", names(got))
	}
	acquire(t, b, 10)
	if got, _ := p.Pick("m", 0); len(got) != 0 {
		t.Fatalf("b merely full: got %v, want nothing (ejected a stays out)", names(got))
	}
	for i := 0; i < 10; i++ {
		b.Release()
	}
	b.healthy.Store(false)
	if got, _ := p.Pick("m", 0); len(got) != 1 || got[0] != a {
		t.Fatalf("b down: got %v, want the ejected node as a last resort", names(got))
	}
}

// TestPickScoreOrder orders nodes fed with real engine expositions.
func TestPickScoreOrder(t *testing.T) {
	nodes := []NodeConfig{
		{Name: "busy-vllm", URL: "http://10.0.0.1:8000", Models: []string{"m"}, MaxConcurrency: 16},
		{Name: "legacy-vllm", URL: "http://10.0.0.2:8000", Models: []string{"m"}, MaxConcurrency: 16},
		{Name: "tgi", URL: "http://10.0.0.3:8000", Kind: "tgi", Models: []string{"m"}, MaxConcurrency: 16},
		{Name: "sglang", URL: "http://10.0.0.4:8000", Kind: "sglang", Models: []string{"m"}, MaxConcurrency: 32},
		{Name: "openai", URL: "http://10.0.0.5:8000/v1", Kind: "openai", Models: []string{"m"}, MaxConcurrency: 16},
	}
	p, _ := newTestPool(t, nil, nodes)
	files := map[string]string{"busy-vllm": "vllm_v1.txt", "legacy-vllm": "vllm_legacy.txt", "tgi": "tgi.txt", "sglang": "sglang.txt"}
	for _, n := range p.Nodes() {
		if f, ok := files[n.Name()]; ok {
			feed(p, n, string(fixture(t, f)))
		}
	}
	// legacy: 7 running of 16, nothing waiting, 21% KV: clearly the best.
	// openai: unknown (0.5 each part). busy-vllm: full batch (12 of 16 plus
	// 3 waiting). sglang: 21 of 32, 4 waiting. tgi: 32 running, 6 waiting.
	want := []string{"legacy-vllm", "openai", "busy-vllm", "sglang", "tgi"}
	for i := 0; i < 20; i++ {
		got, _ := p.Pick("m", 0)
		if !slices.Equal(names(got), want) {
			for _, st := range p.Status() {
				t.Logf("%s: %+v", st.Name, st.ScoreParts)
			}
			t.Fatalf("order %v, want %v", names(got), want)
		}
	}
}

// TestPickTieBreakIsRandom: identical nodes come first equally often.
func TestPickTieBreakIsRandom(t *testing.T) {
	for _, pol := range []string{"score", "least_inflight"} {
		t.Run(pol, func(t *testing.T) {
			p, _ := newTestPool(t, func(c *Config) { c.Policy = pol }, testNodes(3))
			first := map[string]int{}
			for i := 0; i < 3000; i++ {
				got, _ := p.Pick("m", 0)
				first[got[0].Name()]++
			}
			for _, n := range []string{"a", "b", "c"} {
				if first[n] < 850 || first[n] > 1150 {
					t.Fatalf("first-place counts %v, want about 1000 each", first)
				}
			}
		})
	}
}

func TestPickPolicies(t *testing.T) {
	t.Run("round_robin rotates and skips full nodes", func(t *testing.T) {
		p, _ := newTestPool(t, func(c *Config) { c.Policy = "round_robin" }, testNodes(3))
		var firsts []string
		for i := 0; i < 6; i++ {
			got, _ := p.Pick("m", 0)
			if len(got) != 3 {
				t.Fatalf("got %v", names(got))
			}
			firsts = append(firsts, got[0].Name())
		}
		if firsts[0] == firsts[1] || firsts[1] == firsts[2] || firsts[0] != firsts[3] {
			t.Fatalf("first picks %v do not rotate", firsts)
		}
		acquire(t, p.Nodes()[1], 10)
		for i := 0; i < 3; i++ {
			if got, _ := p.Pick("m", 0); len(got) != 2 || slices.Contains(got, p.Nodes()[1]) {
				t.Fatalf("full node not skipped: %v", names(got))
			}
		}
	})
	t.Run("least_inflight orders by in-flight over weight", func(t *testing.T) {
		nodes := testNodes(3)
		nodes[2].Weight = 4
		p, _ := newTestPool(t, func(c *Config) { c.Policy = "least_inflight" }, nodes)
		acquire(t, p.Nodes()[0], 3)
		acquire(t, p.Nodes()[1], 1)
		acquire(t, p.Nodes()[2], 6) // 6/4 = 1.5
		if got, _ := p.Pick("m", 0); !slices.Equal(names(got), []string{"b", "c", "a"}) {
			t.Fatalf("order %v", names(got))
		}
	})
	t.Run("score: node weight scales the score", func(t *testing.T) {
		nodes := testNodes(2)
		nodes[1].Weight = 2
		p, _ := newTestPool(t, nil, nodes)
		feed(p, p.Nodes()[0], vllmText(0, 0, 0))
		feed(p, p.Nodes()[1], vllmText(8, 0, 0.5)) // busier, but twice the weight
		got, _ := p.Pick("m", 0)
		if got[0].Name() != "b" {
			t.Fatalf("order %v", names(got))
		}
		st := p.Status()
		if !near(st[1].Score, 2*st[1].ScoreParts.Total/2) || st[1].Score <= st[0].Score {
			t.Fatalf("scores %v %v", st[0].Score, st[1].Score)
		}
	})
	t.Run("score: a burst spreads before the next scrape", func(t *testing.T) {
		p, _ := newTestPool(t, nil, testNodes(3))
		for _, n := range p.Nodes() {
			feed(p, n, vllmText(0, 0, 0))
		}
		count := map[string]int{}
		for i := 0; i < 24; i++ {
			got, _ := p.Pick("m", 0)
			acquire(t, got[0], 1)
			count[got[0].Name()]++
		}
		for _, n := range []string{"a", "b", "c"} {
			if count[n] != 8 {
				t.Fatalf("burst of 24 split %v, want 8 each", count)
			}
		}
	})
}

// TestAffinity: with an affinity weight, a key sticks to one node (its
// rendezvous favourite); without one, or with key 0, it does not; losing a
// node moves only that node's keys.
func TestAffinity(t *testing.T) {
	p, _ := newTestPool(t, func(c *Config) { c.Weights.Affinity = 0.3 }, testNodes(4))
	fav := map[uint64]string{}
	spread := map[string]int{}
	for k := uint64(1); k <= 400; k++ {
		got, _ := p.Pick("m", k)
		for i := 0; i < 5; i++ {
			if again, _ := p.Pick("m", k); again[0] != got[0] {
				t.Fatalf("key %d moved from %s to %s at equal load", k, got[0].Name(), again[0].Name())
			}
		}
		fav[k] = got[0].Name()
		spread[got[0].Name()]++
	}
	for _, n := range p.Nodes() {
		if spread[n.Name()] < 60 {
			t.Fatalf("keys per node %v: rendezvous should spread keys", spread)
		}
	}
	// Take node b out: only b's keys move.
	p.Nodes()[1].healthy.Store(false)
	for k := uint64(1); k <= 400; k++ {
		got, _ := p.Pick("m", k)
		if fav[k] != "b" && got[0].Name() != fav[k] {
			t.Fatalf("key %d moved from %s to %s when b left", k, fav[k], got[0].Name())
		}
	}
	// Affinity does not override load: a favourite with a queue loses.
	p.Nodes()[1].healthy.Store(true)
	for _, n := range p.Nodes() {
		feed(p, n, vllmText(0, 0, 0))
	}
	var key uint64
	for k, n := range fav {
		if n == "a" {
			key = k
			break
		}
	}
	if got, _ := p.Pick("m", key); got[0].Name() != "a" {
		t.Fatalf("idle favourite a not first: %v", names(got))
	}
	feed(p, p.Nodes()[0], vllmText(10, 2, 0))
	if got, _ := p.Pick("m", key); got[0].Name() == "a" {
		t.Fatal("a favourite with a queue still came first")
	}

	// Weight 0 (the default): no stickiness.
	p0, _ := newTestPool(t, nil, testNodes(4))
	firsts := map[string]bool{}
	for i := 0; i < 200; i++ {
		got, _ := p0.Pick("m", 12345)
		firsts[got[0].Name()] = true
	}
	if len(firsts) < 4 {
		t.Fatalf("affinity weight 0 still sticks: %v", firsts)
	}
}

func TestPickAllocations(t *testing.T) {
	for _, pol := range []string{"score", "round_robin", "least_inflight"} {
		p, _ := newTestPool(t, func(c *Config) { c.Policy = pol; c.Weights.Affinity = 0.2 }, testNodes(8))
		for _, n := range p.Nodes() {
			feed(p, n, vllmText(2, 0, 0.3))
			p.Report(n, OutcomeSuccess, 80*time.Millisecond)
		}
		if a := testing.AllocsPerRun(200, func() { p.Pick("m", 77) }); a > 1 {
			t.Fatalf("%s: Pick allocates %v times, want 1 (the result)", pol, a)
		}
	}
}

func BenchmarkPick(b *testing.B) {
	for _, size := range []int{3, 16} {
		b.Run(fmt.Sprintf("nodes=%d", size), func(b *testing.B) {
			p, _ := newTestPool(b, nil, testNodes(size))
			for _, n := range p.Nodes() {
				feed(p, n, vllmText(2, 0, 0.3))
				p.Report(n, OutcomeSuccess, 80*time.Millisecond)
			}
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					p.Pick("m", 0)
				}
			})
		})
	}
}
