package cache

import (
	"strings"
	"sync"
	"testing"
	"time"
)

type breakerClock struct{ t time.Time }

func (c *breakerClock) now() time.Time          { return c.t }
func (c *breakerClock) advance(d time.Duration) { c.t = c.t.Add(d) }

// TestBreaker runs scripts of steps on a breaker with failures=3,
// window=10s, openFor=5s and a fake clock. Steps: "F" failure, "S" success,
// "+d" advance the clock, "allow"/"deny" expect Allow's answer,
// "=state" expect the state.
func TestBreaker(t *testing.T) {
	tests := []struct {
		name  string
		steps string
	}{
		{"starts closed", "=closed allow allow =closed"},
		{"opens after N failures in window", "F F =closed allow F =open deny deny"},
		{"failures spread over the window", "F +4s F +4s F =open deny"},
		{"failures outside the window do not count", "F +6s F +6s F =closed allow +3s F =open"},
		{"exactly window apart is outside", "F +10s F F =closed F =open"},
		{"successes while closed do not reset the window", "F S F S F =open"},
		{"stays open until openFor", "F F F +4999ms deny =open"},
		{"half-open lets one probe through", "F F F +5s allow =half_open deny deny"},
		{"probe success closes", "F F F +5s allow S =closed allow allow"},
		{"probe failure re-opens", "F F F +5s allow F =open deny +4s deny +1s allow =half_open"},
		{"closed again needs N fresh failures", "F F F +5s allow S F F =closed allow F =open"},
		{"a lost probe is replaced after openFor", "F F F +5s allow deny +4s deny +1s allow deny"},
		{"late failure while open does not extend it", "F F F +3s F +2s allow =half_open"},
		{"late success while open does not close it", "F F F S =open deny"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := &breakerClock{t: time.Unix(1000, 0)}
			b := NewBreaker(3, 10*time.Second, 5*time.Second)
			b.now = clk.now
			for i, step := range strings.Fields(tt.steps) {
				switch {
				case step == "F":
					b.Failure()
				case step == "S":
					b.Success()
				case step == "allow" || step == "deny":
					if got := b.Allow(); got != (step == "allow") {
						t.Fatalf("step %d (%s): Allow() = %v", i, step, got)
					}
				case step[0] == '+':
					d, err := time.ParseDuration(step[1:])
					if err != nil {
						t.Fatal(err)
					}
					clk.advance(d)
				case step[0] == '=':
					if got := b.State(); got != step[1:] {
						t.Fatalf("step %d: State() = %q, want %q", i, got, step[1:])
					}
				default:
					t.Fatalf("bad step %q", step)
				}
			}
		})
	}
}

func TestBreakerOneFailureMinimum(t *testing.T) {
	b := NewBreaker(0, time.Second, time.Second)
	b.Failure()
	if b.State() != "open" {
		t.Fatalf("state %s, want open", b.State())
	}
}

// TestBreakerConcurrentProbe checks that exactly one of many concurrent
// callers becomes the half-open probe.
func TestBreakerConcurrentProbe(t *testing.T) {
	var mu sync.Mutex
	now := time.Unix(1000, 0)
	b := NewBreaker(1, time.Second, time.Second)
	b.now = func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	b.Failure()
	mu.Lock()
	now = now.Add(time.Second)
	mu.Unlock()
	var wg sync.WaitGroup
	var allowed sync.Map
	for i := range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if b.Allow() {
				allowed.Store(i, true)
			}
		}()
	}
	wg.Wait()
	n := 0
	allowed.Range(func(any, any) bool { n++; return true })
	if n != 1 {
		t.Fatalf("%d probes allowed, want 1", n)
	}
}

func BenchmarkBreakerAllowClosed(b *testing.B) {
	br := NewBreaker(5, 10*time.Second, 10*time.Second)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if br.Allow() {
				br.Success()
			}
		}
	})
}
