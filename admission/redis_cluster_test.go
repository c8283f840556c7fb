package admission

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"frontdoor/internal/redisconn"
	"frontdoor/internal/testenv"
	"frontdoor/internal/units"
)

// newClusterClient builds the gateway's client for a redis.addrs list.
func newClusterClient(t *testing.T, cl *testenv.RedisCluster) *redis.ClusterClient {
	t.Helper()
	c, err := redisconn.New(redisconn.Config{Addrs: cl.Addrs(), Timeout: units.Duration(testTimeout)}, "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	cc, ok := c.(*redis.ClusterClient)
	if !ok {
		t.Fatalf("redisconn.New with addrs built a %T, want *redis.ClusterClient", c)
	}
	return cc
}

// clusterConfig is redisConfig under a prefix of its own.
func clusterConfig(clk *testenv.Clock, prefix string) Config {
	c := redisConfig(clk)
	c.KeyPrefix = prefix
	return c
}

// redisOnly fails when a decision fell back to the local buckets: on a
// cluster that is what a CROSSSLOT (or any other) script error leads to.
func redisOnly(t *testing.T, as ...*Admitter) {
	t.Helper()
	for _, a := range as {
		if st := a.Status(); st.Fallbacks != 0 || st.Redis != "up" {
			t.Fatalf("Status = %+v, want redis up and no fallback decision", st)
		}
	}
}

// TestRedisCluster runs admission against a 3-master Redis Cluster (one for
// every subtest; each has its own key prefix). Every script's keys must
// hash to one slot, else Redis answers CROSSSLOT and decisions fall back.
func TestRedisCluster(t *testing.T) {
	cl := testenv.StartRedisCluster(t, 3)
	ctx := context.Background()

	// AdmitMiss and Settle take the tenant's and the global token buckets.
	t.Run("token budget: charge, refund, debt", func(t *testing.T) {
		clk := testenv.NewClock()
		cfg := clusterConfig(clk, "fd:tb:")
		cfg.Global = Limits{TokensPerMinute: 5000}
		a := mustNew(t, cfg, map[string]Limits{"acme": {TokensPerMinute: 1000}}, newClusterClient(t, cl))
		testTokenBudget(t, a, clk)
		redisOnly(t, a)
	})

	// Enter takes a tenant's request bucket and lease set; AdmitMiss a
	// tenant's token bucket and both global buckets. Tenants spread over
	// the masters.
	t.Run("rates and retry-after, tenants on every master", func(t *testing.T) {
		clk := testenv.NewClock()
		cfg := clusterConfig(clk, "fd:rr:")
		cfg.Global = Limits{RPS: 10, Burst: 3, TokensPerMinute: 1e6}
		tenants := map[string]Limits{}
		for i := range 12 {
			tenants[fmt.Sprint("t", i)] = Limits{RPS: 10, Burst: 2, TokensPerMinute: 6000, MaxConcurrency: 4}
		}
		c := newClusterClient(t, cl)
		a := mustNew(t, cfg, tenants, c)
		for name := range tenants {
			for i := range 2 {
				p, rej := a.Enter(ctx, name)
				if rej != nil {
					t.Fatalf("%s request %d within the burst: %v", name, i, rej)
				}
				p.Release()
			}
			_, rej := a.Enter(ctx, name)
			if rej == nil || rej.Limit != LimitTenantRPS || rej.RetryAfter < 90*time.Millisecond || rej.RetryAfter > 110*time.Millisecond {
				t.Fatalf("%s third request: %+v, want tenant_rps with a retry after 100ms", name, rej)
			}
		}
		perMaster := map[string]int{}
		var mu sync.Mutex
		err := c.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
			keys, err := m.Keys(ctx, "fd:rr:a:{t:*").Result()
			mu.Lock()
			perMaster[m.Options().Addr] = len(keys)
			mu.Unlock()
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		for addr, n := range perMaster {
			if n == 0 || len(perMaster) != 3 {
				t.Fatalf("tenant keys per master %v: want some on each of 3 (no key on %s)", perMaster, addr)
			}
		}

		for i := range 3 {
			if _, rej := a.AdmitMiss(ctx, fmt.Sprint("t", i), 100); rej != nil {
				t.Fatalf("miss %d within the global burst: %v", i, rej)
			}
		}
		_, rej := a.AdmitMiss(ctx, "t3", 100)
		if rej == nil || rej.Limit != LimitGlobalRPS || rej.RetryAfter < 90*time.Millisecond || rej.RetryAfter > 110*time.Millisecond {
			t.Fatalf("fourth miss: %+v, want global_rps with a retry after 100ms", rej)
		}
		clk.Advance(time.Second)
		if _, rej := a.AdmitMiss(ctx, "t4", 5000); rej != nil {
			t.Fatalf("5000 of 6000 tokens: %v", rej)
		}
		if _, rej := a.AdmitMiss(ctx, "t4", 2000); rej == nil || rej.Limit != LimitTenantTokens {
			t.Fatalf("2000 more tokens: %+v, want tenant_tokens", rej)
		}
		redisOnly(t, a)
	})

	// Two replicas share the concurrency slots; a crashed replica's lease
	// expires, a live one's is renewed.
	t.Run("concurrency leases shared by two replicas", func(t *testing.T) {
		clk := testenv.NewClock()
		cfg := clusterConfig(clk, "fd:cc:")
		cfg.LeaseTTL = 10 * time.Second
		tenants := map[string]Limits{"acme": {MaxConcurrency: 2}}
		a := mustNew(t, cfg, tenants, newClusterClient(t, cl))
		b := mustNew(t, cfg, tenants, newClusterClient(t, cl))
		pa, rej := a.Enter(ctx, "acme")
		if rej != nil {
			t.Fatal(rej)
		}
		if _, rej := b.Enter(ctx, "acme"); rej != nil { // never released: b "crashes"
			t.Fatal(rej)
		}
		_ = b.Close()
		if _, rej := a.Enter(ctx, "acme"); rej == nil || rej.Limit != LimitTenantConcurrency {
			t.Fatalf("third request: %+v, want tenant_concurrency", rej)
		}
		pa.Release()
		pa, rej = a.Enter(ctx, "acme")
		if rej != nil {
			t.Fatalf("after a release: %v", rej)
		}
		for range 2 { // 12s: b's lease expires, a's is renewed
			clk.Advance(6 * time.Second)
			if err := a.rs.renew(); err != nil {
				t.Fatal(err)
			}
		}
		pb, rej := a.Enter(ctx, "acme")
		if rej != nil {
			t.Fatalf("the crashed replica's lease did not expire: %v", rej)
		}
		if _, rej := a.Enter(ctx, "acme"); rej == nil || rej.Limit != LimitTenantConcurrency {
			t.Fatalf("the renewed lease was lost: %+v, want tenant_concurrency", rej)
		}
		pa.Release()
		pb.Release()
		redisOnly(t, a, b)
	})

	// Every admission holds a lease in the cluster, Redis answering or
	// not; the subtests say which path the decisions took.
	t.Run("concurrency stress", func(t *testing.T) {
		stressRedis(t, func(t *testing.T, h *faultHook) redis.UniversalClient {
			c := newClusterClient(t, cl)
			c.AddHook(h)
			return c
		})
	})
}
