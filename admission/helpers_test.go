package admission

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"frontdoor/internal/redisconn"
	"frontdoor/internal/testenv"
	"frontdoor/internal/units"
)

// fakeSleep makes an Admitter's waits advance clk instead of sleeping, and
// records them.
func fakeSleep(a *Admitter, clk *testenv.Clock) *[]time.Duration {
	var mu sync.Mutex
	slept := new([]time.Duration)
	a.sleep = func(ctx context.Context, d time.Duration) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		mu.Lock()
		*slept = append(*slept, d)
		mu.Unlock()
		clk.Advance(d)
		return nil
	}
	return slept
}

func mustNew(t testing.TB, cfg Config, tenants map[string]Limits, c redis.UniversalClient) *Admitter {
	t.Helper()
	a, err := New(cfg, tenants, c)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { _ = a.Close() })
	return a
}

// countHook counts round trips (commands and pipelines) of a client.
type countHook struct {
	n    atomic.Int64
	mu   sync.Mutex
	cmds []string
}

func (h *countHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *countHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.n.Add(1)
		h.mu.Lock()
		h.cmds = append(h.cmds, cmd.Name())
		h.mu.Unlock()
		return next(ctx, cmd)
	}
}

func (h *countHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.n.Add(1)
		return next(ctx, cmds)
	}
}

// take returns the round trips since the last take and their command names.
func (h *countHook) take() (int64, []string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	cmds := h.cmds
	h.cmds = nil
	return h.n.Swap(0), cmds
}

// newClient builds a client the way the gateway does (redisconn: short
// timeouts, no retries), with a timeout that tolerates -race on 2 cores.
func newClient(t testing.TB, r *testenv.Redis, timeout time.Duration) redis.UniversalClient {
	t.Helper()
	c, err := redisconn.New(redisconn.Config{URL: r.URL(), Timeout: units.Duration(timeout)}, "")
	if err != nil {
		t.Fatalf("redis client: %v", err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func within(got, want, frac float64) bool {
	return got >= want*(1-frac) && got <= want*(1+frac)
}
