package cache

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"frontdoor/internal/units"
)

type breakerClock struct{ t time.Time }

func (c *breakerClock) now() time.Time          { return c.t }
func (c *breakerClock) advance(d time.Duration) { c.t = c.t.Add(d) }

func testBreakerConfig(ratio float64, minCalls int) BreakerConfig {
	return BreakerConfig{FailureRatio: ratio, MinCalls: minCalls, Window: units.Duration(10 * time.Second), OpenFor: units.Duration(5 * time.Second)}
}

// TestBreaker runs scripts of steps on a breaker with failure_ratio 0.5,
// min_calls 4, window 10s, open_for 5s and a fake clock. Steps: "F"
// failure, "S" success, "Nx" repeat the next step N times, "+d" advance the
// clock, "allow"/"deny" expect Allow's answer, "=state" expect the state.
func TestBreaker(t *testing.T) {
	tests := []struct {
		name  string
		steps string
	}{
		{"starts closed", "=closed allow allow =closed"},
		{"opens at min_calls when half failed", "F F =closed S allow F =open deny deny"},
		{"needs min_calls calls", "F F F =closed F =open"},
		{"a burst of failures among many successes stays closed", "40x S 10x F =closed allow"},
		{"a failure ratio reached opens", "10x S 10x F =open"},
		{"only a failure opens", "F F F S =closed F =open"},
		{"calls spread over the window count", "F +4s F +4s F +1s F =open"},
		{"calls older than the window do not count", "F +6s F +6s F F =closed +1s F =open"},
		{"successes age out too", "10x S +11s F F F =closed F =open"},
		{"stays open until open_for", "4x F +4999ms deny =open"},
		{"half-open lets one probe through", "4x F +5s allow =half_open deny deny"},
		{"probe success closes", "4x F +5s allow S =closed allow allow"},
		{"probe failure re-opens", "4x F +5s allow F =open deny +4s deny +1s allow =half_open"},
		{"closed again needs a fresh window", "4x F +5s allow S F F F =closed F =open"},
		{"a lost probe is replaced after open_for", "4x F +5s allow deny +4s deny +1s allow deny"},
		{"late failure while open does not extend it", "4x F +3s F +2s allow =half_open"},
		{"late success while open does not close it", "4x F S =open deny"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := &breakerClock{t: time.Unix(1000, 0)}
			b := NewBreaker(testBreakerConfig(0.5, 4), nil)
			b.now = clk.now
			repeat := 1
			for i, step := range strings.Fields(tt.steps) {
				n := repeat
				repeat = 1
				for range n {
					switch {
					case strings.HasSuffix(step, "x"):
						if _, err := fmt.Sscan(step[:len(step)-1], &repeat); err != nil {
							t.Fatal(err)
						}
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
						if got, _ := b.State(); got.String() != step[1:] {
							t.Fatalf("step %d: State() = %q, want %q", i, got, step[1:])
						}
					default:
						t.Fatalf("bad step %q", step)
					}
				}
			}
		})
	}
}

// TestBreakerReportsChanges checks the callback and the state's start time.
func TestBreakerReportsChanges(t *testing.T) {
	clk := &breakerClock{t: time.Unix(1000, 0)}
	var got []string
	b := NewBreaker(testBreakerConfig(1, 1), func(from, to BreakerState) { got = append(got, from.String()+">"+to.String()) })
	b.now = clk.now
	b.Failure()
	if _, since := b.State(); !since.Equal(clk.t) {
		t.Fatalf("since %v, want %v", since, clk.t)
	}
	clk.advance(5 * time.Second)
	b.Allow()
	b.Success()
	if want := "closed>open open>half_open half_open>closed"; strings.Join(got, " ") != want {
		t.Fatalf("changes %v, want %s", got, want)
	}
}

// TestBreakerConcurrentProbe checks that exactly one of many concurrent
// callers becomes the half-open probe.
func TestBreakerConcurrentProbe(t *testing.T) {
	var mu sync.Mutex
	now := time.Unix(1000, 0)
	b := NewBreaker(testBreakerConfig(1, 1), nil)
	b.now = func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	b.Failure()
	mu.Lock()
	now = now.Add(5 * time.Second)
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
	br := NewBreaker(testBreakerConfig(0.5, 20), nil)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if br.Allow() {
				br.Success()
			}
		}
	})
}
