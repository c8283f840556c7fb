package balancer

import (
	"math/rand/v2"
	"testing"
	"time"

	"frontdoor/internal/testenv"
)

func breakerPool(t *testing.T) (*Pool, *testenv.Clock, *Node) {
	t.Helper()
	p, clk := newTestPool(t, func(c *Config) {
		c.Breaker = BreakerConfig{Failures: 3, Window: 10e9, OpenFor: 5e9, HalfOpenSuccesses: 2, HalfOpenProbes: 1}
	}, testNodes(2))
	n := p.Nodes()[0]
	acquire(t, n, 1) // keeps passive health out of these tests
	t.Cleanup(n.Release)
	return p, clk, n
}

func (n *Node) stateNow() string { return n.state(n.p.nowNanos()) }

// TestBreakerLifecycle: closed → open on `failures` within `window`, open
// for `open_for`, half-open lets one trial through at a time,
// `half_open_successes` successes close it.
func TestBreakerLifecycle(t *testing.T) {
	p, clk, n := breakerPool(t)
	p.Report(n, OutcomeFailure, 0)
	p.Report(n, OutcomeSuccess, time.Millisecond) // successes don't reset the count
	p.Report(n, OutcomeFailure, 0)
	if n.stateNow() != StateHealthy {
		t.Fatalf("state %s after 2 failures, want healthy", n.stateNow())
	}
	clk.Advance(time.Second)
	p.Report(n, OutcomeFailure, 0)
	if n.stateNow() != StateOpen || n.TryAcquire() {
		t.Fatalf("state %s after 3 failures in 1s, want open and refusing", n.stateNow())
	}
	clk.Advance(5*time.Second - 1)
	if n.stateNow() != StateOpen || n.TryAcquire() {
		t.Fatal("breaker let a request through before open_for passed")
	}
	clk.Advance(1)
	if n.stateNow() != StateHalfOpen {
		t.Fatalf("state %s after open_for, want half_open", n.stateNow())
	}
	if !n.TryAcquire() {
		t.Fatal("half-open breaker refused the trial request")
	}
	if n.TryAcquire() {
		t.Fatal("half-open breaker let a second concurrent trial through (half_open_probes 1)")
	}
	if got, _ := p.Pick("m", 0); len(got) != 1 || got[0].Name() != "b" {
		t.Fatalf("half-open node with its trial taken is a candidate: %v", names(got))
	}
	p.Report(n, OutcomeSuccess, time.Millisecond)
	n.Release()
	if n.stateNow() != StateHalfOpen {
		t.Fatalf("state %s after 1 of 2 successes", n.stateNow())
	}
	acquire(t, n, 1)
	p.Report(n, OutcomeSuccess, time.Millisecond)
	n.Release()
	if n.stateNow() != StateHealthy || n.brState.Load() != breakerClosed {
		t.Fatalf("state %s after 2 successes, want closed", n.stateNow())
	}
	// Closed again: fresh count, no limit on concurrency but the cap.
	acquire(t, n, 5)
	for i := 0; i < 5; i++ {
		n.Release()
	}
	if st := p.Status()[0]; st.Breaker.State != "closed" || st.Breaker.Opens != 1 {
		t.Fatalf("breaker status %+v", st.Breaker)
	}
}

func TestBreakerHalfOpenFailureReopens(t *testing.T) {
	p, clk, n := breakerPool(t)
	for i := 0; i < 3; i++ {
		p.Report(n, OutcomeFailure, 0)
	}
	clk.Advance(5 * time.Second)
	acquire(t, n, 1)
	p.Report(n, OutcomeSuccess, time.Millisecond)
	n.Release()
	acquire(t, n, 1)
	p.Report(n, OutcomeFailure, 0)
	n.Release()
	if n.stateNow() != StateOpen {
		t.Fatalf("state %s after a half-open failure, want open", n.stateNow())
	}
	clk.Advance(5*time.Second - 1)
	if n.TryAcquire() {
		t.Fatal("re-opened breaker let a request through before a new open_for")
	}
	clk.Advance(1)
	if !n.TryAcquire() {
		t.Fatal("no trial after the second open_for")
	}
	n.Release()
	if st := p.Status()[0]; st.Breaker.Opens != 2 {
		t.Fatalf("opens %d, want 2", st.Breaker.Opens)
	}
}

func TestBreakerWindow(t *testing.T) {
	p, clk, n := breakerPool(t)
	// Failures spread wider than the window never open it.
	for i := 0; i < 20; i++ {
		p.Report(n, OutcomeFailure, 0)
		clk.Advance(6 * time.Second)
	}
	if n.stateNow() != StateHealthy {
		t.Fatalf("state %s: 1 failure per 6s opened a 3-in-10s breaker", n.stateNow())
	}
	// Canceled requests say nothing about the node.
	for i := 0; i < 10; i++ {
		p.Report(n, OutcomeCanceled, 0)
	}
	if n.stateNow() != StateHealthy {
		t.Fatal("cancellations opened the breaker")
	}
	if st := p.Status()[0]; st.Requests["failure"] != 20 || st.Requests["canceled"] != 10 {
		t.Fatalf("requests %v", st.Requests)
	}
}

// TestBreakerLostTrial: a trial whose result never comes back frees its
// slot after open_for, so the node is not stuck half-open forever.
func TestBreakerLostTrial(t *testing.T) {
	p, clk, n := breakerPool(t)
	for i := 0; i < 3; i++ {
		p.Report(n, OutcomeFailure, 0)
	}
	clk.Advance(5 * time.Second)
	acquire(t, n, 1) // never reported
	if n.TryAcquire() {
		t.Fatal("second trial while the first is out")
	}
	clk.Advance(5 * time.Second)
	if !n.TryAcquire() {
		t.Fatal("trial slot still held after open_for")
	}
}

// TestBreakerConcurrent hammers a flapping breaker from many goroutines
// (for -race): every slot comes back and the counters add up.
func TestBreakerConcurrent(t *testing.T) {
	p, clk := newTestPool(t, func(c *Config) {
		c.Breaker = BreakerConfig{Failures: 3, Window: 10e9, OpenFor: 1e9, HalfOpenSuccesses: 3, HalfOpenProbes: 2}
	}, []NodeConfig{{Name: "a", URL: "http://127.0.0.1:1", Models: []string{"m"}, MaxConcurrency: 1000}})
	n := p.Nodes()[0]
	acquire(t, n, 1)
	for i := 0; i < 3; i++ {
		p.Report(n, OutcomeFailure, 0)
	}
	clk.Advance(time.Second)
	done := make(chan int)
	for g := 0; g < 8; g++ {
		go func() {
			got := 0
			for i := 0; i < 200; i++ {
				if n.TryAcquire() {
					got++
					if rand.IntN(4) == 0 {
						p.Report(n, OutcomeFailure, 0)
					} else {
						p.Report(n, OutcomeSuccess, time.Millisecond)
					}
					n.Release()
				}
				clk.Advance(time.Millisecond)
			}
			done <- got
		}()
	}
	total := 0
	for g := 0; g < 8; g++ {
		total += <-done
	}
	st := p.Status()[0]
	if got := st.Requests["success"] + st.Requests["failure"]; got != uint64(total)+3 {
		t.Fatalf("reported %d, acquired %d", got, total+3)
	}
	if n.Inflight() != 1 {
		t.Fatalf("in-flight %d, want 1", n.Inflight())
	}
}
