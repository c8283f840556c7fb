package testenv

import (
	"context"
	"testing"
	"time"

	"frontdoor/internal/gpusim"
)

// GPUSim starts a simulated node in process on a free loopback port. mutate
// adjusts the defaults (zero timings, one model "qwen3-8b").
func GPUSim(t testing.TB, mutate func(*gpusim.Config)) *gpusim.Server {
	t.Helper()
	c := gpusim.DefaultConfig()
	c.Listen = "127.0.0.1:0"
	c.Models = []string{"qwen3-8b"}
	c.TTFT, c.ITL = 0, 0
	c.Seed = 1
	if mutate != nil {
		mutate(&c)
	}
	s, err := gpusim.New(c)
	if err != nil {
		t.Fatalf("gpusim config: %v", err)
	}
	if _, err := s.Start(); err != nil {
		t.Fatalf("gpusim start: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = s.Shutdown(ctx)
	})
	return s
}

// Eventually polls cond every 10ms until it holds or d passes.
func Eventually(t testing.TB, d time.Duration, cond func() bool, format string, args ...any) {
	t.Helper()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if cond() {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	if !cond() {
		t.Fatalf(format, args...)
	}
}
