package balancer

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"frontdoor/internal/testenv"
)

func ejectPool(t *testing.T) (*Pool, *testenv.Clock, *Node) {
	t.Helper()
	p, clk := newTestPool(t, func(c *Config) {
		c.Eject = EjectConfig{KVUsageAbove: 0.92, QueueAbove: 8, After: 2, RestoreAfter: 2, Cooldown: 5e9}
	}, testNodes(2))
	return p, clk, p.Nodes()[0]
}

// TestEjectFlappingNodeOnce: KV usage flapping between 91% and 93% around
// a 0.92 threshold, scraped every second for two minutes, ejects the node
// once, and it stays out: restoring needs restore_after scrapes clearly
// below the threshold (by the hysteresis margin), not just under it.
func TestEjectFlappingNodeOnce(t *testing.T) {
	p, clk, n := ejectPool(t)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 120; i++ {
		kv := 0.91
		if rng.IntN(2) == 0 {
			kv = 0.93
		}
		feed(p, n, vllmText(4, 0, kv))
		clk.Advance(time.Second)
	}
	st := p.Status()[0]
	if st.Ejection.Count != 1 || !st.Ejection.Ejected || st.State != StateEjected || st.Ejection.Reason != "kv_usage_above" {
		t.Fatalf("ejection after flapping: %+v (state %s), want ejected exactly once", st.Ejection, st.State)
	}
	// It calms down: restored after restore_after good scrapes.
	feed(p, n, vllmText(4, 0, 0.5))
	if !n.Ejected() {
		t.Fatal("restored after one good scrape (restore_after 2)")
	}
	feed(p, n, vllmText(4, 0, 0.5))
	if n.Ejected() || p.Status()[0].State != StateHealthy {
		t.Fatal("not restored after two good scrapes past the cooldown")
	}
}

func TestEjectNeedsConsecutiveScrapes(t *testing.T) {
	p, _, n := ejectPool(t)
	for i := 0; i < 10; i++ { // over, under, over, under...
		feed(p, n, vllmText(4, 0, 0.95))
		feed(p, n, vllmText(4, 0, 0.80))
	}
	if n.Ejected() {
		t.Fatal("ejected without `after` consecutive bad scrapes")
	}
	feed(p, n, vllmText(4, 9, 0.5)) // queue over queue_above
	feed(p, n, vllmText(4, 12, 0.5))
	if !n.Ejected() || p.Status()[0].Ejection.Reason != "queue_above" {
		t.Fatalf("not ejected for queue: %+v", p.Status()[0].Ejection)
	}
}

func TestEjectCooldown(t *testing.T) {
	p, clk, n := ejectPool(t)
	feed(p, n, vllmText(4, 0, 0.99))
	feed(p, n, vllmText(4, 0, 0.99))
	if !n.Ejected() {
		t.Fatal("not ejected")
	}
	for i := 0; i < 4; i++ { // 4 good scrapes within the 5s cooldown
		clk.Advance(time.Second)
		feed(p, n, vllmText(0, 0, 0.1))
	}
	if !n.Ejected() {
		t.Fatal("restored before the cooldown")
	}
	clk.Advance(time.Second)
	feed(p, n, vllmText(0, 0, 0.1))
	if n.Ejected() {
		t.Fatal("not restored after the cooldown with good scrapes")
	}
}

// TestEjectUnknownIsNoEvidence: scrapes without the metrics neither eject
// nor restore.
func TestEjectUnknownIsNoEvidence(t *testing.T) {
	p, clk, n := ejectPool(t)
	feed(p, n, vllmText(4, 0, 0.99))
	feed(p, n, "process_cpu_seconds_total 1\n")
	feed(p, n, vllmText(4, 0, 0.99))
	if !n.Ejected() {
		t.Fatal("an unknown scrape in between reset the count")
	}
	clk.Advance(time.Minute)
	for i := 0; i < 5; i++ {
		feed(p, n, vllmText(math.NaN(), math.NaN(), math.NaN()))
	}
	if !n.Ejected() {
		t.Fatal("unknown scrapes restored the node")
	}
}
