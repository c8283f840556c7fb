package balancer

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"
)

func TestWaitForSlot(t *testing.T) {
	nodes := testNodes(2)
	nodes[0].MaxConcurrency, nodes[1].MaxConcurrency = 1, 1
	nodes = append(nodes, NodeConfig{Name: "other", URL: "http://127.0.0.1:1", Models: []string{"x"}, MaxConcurrency: 1})
	p, _ := newTestPool(t, nil, nodes)
	a, b, other := p.Nodes()[0], p.Nodes()[1], p.Nodes()[2]

	if !p.WaitForSlot(context.Background(), "m", time.Second) {
		t.Fatal("free slot not reported at once")
	}
	acquire(t, a, 1)
	acquire(t, b, 1)
	acquire(t, other, 1)

	start := time.Now()
	if p.WaitForSlot(context.Background(), "m", 50*time.Millisecond) {
		t.Fatal("reported a slot with every node full")
	}
	if el := time.Since(start); el < 50*time.Millisecond || el > time.Second {
		t.Fatalf("timed out after %v, want about 50ms", el)
	}
	if p.WaitForSlot(context.Background(), "m", 0) || p.WaitForSlot(context.Background(), "nope", time.Second) {
		t.Fatal("maxWait 0 or an unknown model waited or succeeded")
	}

	// A Release of a node serving another model does not wake us; one of
	// ours does, promptly.
	got := make(chan time.Duration, 1)
	go func() {
		start := time.Now()
		if p.WaitForSlot(context.Background(), "m", 5*time.Second) {
			got <- time.Since(start)
		} else {
			got <- -1
		}
	}()
	time.Sleep(30 * time.Millisecond)
	other.Release()
	select {
	case d := <-got:
		t.Fatalf("woken by another model's node after %v", d)
	case <-time.After(50 * time.Millisecond):
	}
	released := time.Now()
	b.Release()
	select {
	case d := <-got:
		if d < 0 {
			t.Fatal("WaitForSlot returned false after a Release")
		}
		if lag := time.Since(released); lag > 200*time.Millisecond {
			t.Fatalf("woke %v after the Release", lag)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("not woken by Release")
	}

	// Undrain wakes too; ctx cancel ends the wait.
	acquire(t, b, 1)
	a.Release()
	if err := p.Drain("a"); err != nil {
		t.Fatal(err)
	}
	woke := make(chan bool, 1)
	go func() { woke <- p.WaitForSlot(context.Background(), "m", 5*time.Second) }()
	time.Sleep(20 * time.Millisecond)
	if err := p.Undrain("a"); err != nil {
		t.Fatal(err)
	}
	if !<-woke {
		t.Fatal("Undrain did not wake the waiter")
	}
	acquire(t, a, 1)
	ctx, cancel := context.WithCancel(context.Background())
	go func() { time.Sleep(20 * time.Millisecond); cancel() }()
	if p.WaitForSlot(ctx, "m", 5*time.Second) {
		t.Fatal("canceled wait reported a slot")
	}
}

// TestWaitForSlotManyWaiters: N waiters, slots freed one at a time; each
// winner takes its slot; nobody spins and nobody is lost.
func TestWaitForSlotManyWaiters(t *testing.T) {
	nodes := testNodes(1)
	nodes[0].MaxConcurrency = 2
	p, _ := newTestPool(t, nil, nodes)
	n := p.Nodes()[0]
	acquire(t, n, 2)
	const waiters = 10
	served := make(chan struct{}, waiters)
	for i := 0; i < waiters; i++ {
		go func() {
			deadline := time.Now().Add(5 * time.Second)
			for time.Now().Before(deadline) {
				if !p.WaitForSlot(context.Background(), "m", time.Until(deadline)) {
					return
				}
				if n.TryAcquire() {
					time.Sleep(time.Millisecond)
					n.Release()
					served <- struct{}{}
					return
				}
			}
		}()
	}
	time.Sleep(20 * time.Millisecond)
	n.Release()
	n.Release()
	for i := 0; i < waiters; i++ {
		select {
		case <-served:
		case <-time.After(5 * time.Second):
			t.Fatalf("only %d of %d waiters served", i, waiters)
		}
	}
}

func TestDrain(t *testing.T) {
	p, _ := newTestPool(t, nil, testNodes(2))
	a := p.Nodes()[0]
	acquire(t, a, 1) // in flight before the drain
	if err := p.Drain("a"); err != nil {
		t.Fatal(err)
	}
	if got, _ := p.Pick("m", 0); len(got) != 1 || got[0] == a {
		t.Fatalf("drained node picked: %v", names(got))
	}
	if a.Inflight() != 1 || p.Status()[0].State != StateDrained || !p.AnyUsable("m") || !p.Ready() {
		t.Fatal("drain disturbed in-flight work or the rest of the pool")
	}
	a.Release()
	if err := p.Drain("zzz"); !errors.Is(err, ErrUnknownNode) || !strings.Contains(err.Error(), `"zzz"`) {
		t.Fatalf("Drain(unknown) = %v", err)
	}
	if err := p.Undrain("zzz"); !errors.Is(err, ErrUnknownNode) {
		t.Fatalf("Undrain(unknown) = %v", err)
	}
	if err := p.Undrain("a"); err != nil {
		t.Fatal(err)
	}
	if got, _ := p.Pick("m", 0); len(got) != 2 {
		t.Fatalf("undrained node not back: %v", names(got))
	}
	_ = p.Drain("a")
	_ = p.Drain("b")
	if p.Ready() || p.AnyUsable("m") {
		t.Fatal("all drained but still ready")
	}
}

func TestStatusJSON(t *testing.T) {
	nodes := testNodes(2)
	nodes[0].Models = []string{"m", "m2"}
	p, clk := newTestPool(t, nil, nodes)
	a, b := p.Nodes()[0], p.Nodes()[1]
	feed(p, a, string(fixture(t, "vllm_v1.txt")))
	clk.Advance(1500 * time.Millisecond)
	acquire(t, a, 2)
	p.Report(a, OutcomeSuccess, 120*time.Millisecond)
	p.ReportTokens(a, 100, 2*time.Second)
	b.healthy.Store(false)

	raw, err := json.Marshal(p.Status())
	if err != nil {
		t.Fatal(err)
	}
	var got []map[string]any
	if err := json.Unmarshal(raw, &got); err != nil {
		t.Fatal(err)
	}
	sa, sb := got[0], got[1]
	for k, want := range map[string]any{"name": "a", "kind": "vllm", "state": "healthy", "inflight": 2.0, "max_concurrency": 10.0, "ewma_ttft_seconds": 0.12, "ewma_tpot_seconds": 0.02} {
		if sa[k] != want {
			t.Errorf("%s = %v, want %v", k, sa[k], want)
		}
	}
	m := sa["metrics"].(map[string]any)
	if m["waiting"] != 3.0 || m["running"] != 12.0 || m["kv_usage"] != 0.4375 || m["age_seconds"] != 1.5 || m["stale"] != false {
		t.Errorf("metrics %v", m)
	}
	if sa["breaker"].(map[string]any)["state"] != "closed" || sa["ejection"].(map[string]any)["ejected"] != false {
		t.Errorf("breaker/ejection %v %v", sa["breaker"], sa["ejection"])
	}
	if s := sa["score"].(float64); s <= 0 || s > 1 {
		t.Errorf("score %v", s)
	}
	if sa["requests"].(map[string]any)["success"] != 1.0 {
		t.Errorf("requests %v", sa["requests"])
	}
	if sb["state"] != "unhealthy" || sb["metrics"] != nil || sb["ewma_ttft_seconds"] != nil {
		t.Errorf("b: state %v metrics %v ttft %v", sb["state"], sb["metrics"], sb["ewma_ttft_seconds"])
	}
	for i := 0; i < 2; i++ {
		a.Release()
	}
}

func TestRegisterMetrics(t *testing.T) {
	nodes := testNodes(2)
	nodes[1].Name = "gpu-b.rack:2"
	p, _ := newTestPool(t, nil, nodes)
	a := p.Nodes()[0]
	acquire(t, a, 3)
	p.Report(a, OutcomeFailure, 0) // before registration: carried over
	set := metrics.NewSet()
	p.RegisterMetrics(set)
	p.Report(a, OutcomeSuccess, 250*time.Millisecond)
	p.Report(a, OutcomeSuccess, 40*time.Millisecond)
	_ = p.Drain("gpu-b.rack:2")
	var buf bytes.Buffer
	set.WritePrometheus(&buf)
	out := buf.String()
	for _, want := range []string{
		`frontdoor_node_inflight{node="a"} 3`,
		`frontdoor_node_requests_total{node="a",outcome="success"} 2`,
		`frontdoor_node_requests_total{node="a",outcome="failure"} 1`,
		`frontdoor_node_requests_total{node="a",outcome="canceled"} 0`,
		`frontdoor_node_state{node="a",state="healthy"} 1`,
		`frontdoor_node_state{node="a",state="unhealthy"} 0`,
		`frontdoor_node_state{node="gpu-b.rack:2",state="drained"} 1`,
		`frontdoor_node_ttft_seconds_bucket{node="a",le="0.1"} 1`,
		`frontdoor_node_ttft_seconds_bucket{node="a",le="0.25"} 2`,
		`frontdoor_node_ttft_seconds_count{node="a"} 2`,
		`frontdoor_node_score{node="a"} `,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
	if t.Failed() {
		t.Log(out)
	}
	for i := 0; i < 3; i++ {
		a.Release()
	}
}

// TestCanarySplit: a 90/10 alias over 10,000 random request ids sends
// 10% ± 1.5% to the canary, and a retry (same id) keeps its target.
func TestCanarySplit(t *testing.T) {
	nodes := []NodeConfig{
		{Name: "stable", URL: "http://127.0.0.1:1", Models: []string{"qwen3-8b"}},
		{Name: "canary", URL: "http://127.0.0.1:2", Models: []string{"qwen3-8b-v2"}},
	}
	aliases := []ModelAlias{{Name: "chat", Targets: []ModelTarget{{Model: "qwen3-8b", Weight: 90}, {Model: "qwen3-8b-v2", Weight: 10}}}}
	p, err := New(DefaultConfig(), nodes, aliases)
	if err != nil {
		t.Fatal(err)
	}
	canary := 0
	for i := 0; i < 10_000; i++ {
		id := fmt.Sprintf("%016x", rand.Uint64())
		m, ok := p.Resolve("chat", id)
		if !ok {
			t.Fatal("alias not resolved")
		}
		if again, _ := p.Resolve("chat", id); again != m {
			t.Fatalf("request %s resolved to %s then %s", id, m, again)
		}
		if m == "qwen3-8b-v2" {
			canary++
		}
	}
	if share := float64(canary) / 10_000; share < 0.085 || share > 0.115 {
		t.Fatalf("canary share %.4f, want 0.10 ± 0.015", share)
	}
	if m, ok := p.Resolve("qwen3-8b", "x"); !ok || m != "qwen3-8b" {
		t.Fatal("a served model must resolve to itself")
	}
	if _, ok := p.Resolve("nope", "x"); ok {
		t.Fatal("unknown model resolved")
	}
}

func TestNewRejects(t *testing.T) {
	cfg := DefaultConfig()
	if _, err := New(cfg, append(testNodes(1), testNodes(1)...), nil); err == nil || !strings.Contains(err.Error(), "not unique") {
		t.Fatalf("duplicate names: %v", err)
	}
	cfg.Breaker.HalfOpenProbes = -1
	if _, err := New(cfg, testNodes(1), nil); err == nil || !strings.Contains(err.Error(), "half_open_probes") {
		t.Fatalf("negative half_open_probes: %v", err)
	}
}
