package admission

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"frontdoor/internal/testenv"
)

const testTimeout = 250 * time.Millisecond // client timeout under -race on 2 cores

func redisConfig(clk *testenv.Clock) Config {
	c := Config{Backend: BackendRedis, KeyPrefix: "fd:", Replicas: 2}
	if clk != nil {
		c.Clock = clk.Now
	}
	return c
}

// TestRedisTwoReplicasShareOneQuota drives two Admitters (two replicas, two
// clients) against one redis-server in real time: together they admit what
// one bucket allows, and every decision is one round trip.
func TestRedisTwoReplicasShareOneQuota(t *testing.T) {
	srv := testenv.StartRedis(t)
	tenants := map[string]Limits{"acme": {RPS: 50, Burst: 10}}
	var hooks [2]*countHook
	var reps [2]*Admitter
	for i := range reps {
		c := newClient(t, srv, testTimeout)
		hooks[i] = &countHook{}
		c.AddHook(hooks[i])
		reps[i] = mustNew(t, redisConfig(nil), tenants, c)
		hooks[i].take() // script loading in New
	}
	ctx := context.Background()
	const run = 4 * time.Second
	var admitted, decisions atomic.Int64
	var mu sync.Mutex
	var sent []time.Time // when each decision was asked for
	var wg sync.WaitGroup
	start := time.Now()
	for i := range reps {
		wg.Add(1)
		go func(a *Admitter) { // 100 requests/s per replica: 4x the quota
			defer wg.Done()
			tick := time.NewTicker(10 * time.Millisecond)
			defer tick.Stop()
			for time.Since(start) < run {
				<-tick.C
				t0 := time.Now()
				p, rej := a.Enter(ctx, "acme")
				decisions.Add(1)
				if rej == nil {
					admitted.Add(1)
					p.Release()
				} else if rej.Limit != LimitTenantRPS {
					t.Errorf("limit %q", rej.Limit)
				}
				mu.Lock()
				sent = append(sent, t0)
				mu.Unlock()
			}
		}(reps[i])
	}
	wg.Wait()
	slices.SortFunc(sent, time.Time.Compare)
	first, last := sent[0], sent[len(sent)-1]
	want := 10 + 50*last.Sub(first).Seconds()
	// The bucket holds 10: a pause in the demand longer than 200ms (the
	// scheduler of a loaded machine) lets what it refills past that go
	// unused, which one quota never admits either.
	var unused float64
	for i := 1; i < len(sent); i++ {
		unused += max(0, 50*sent[i].Sub(sent[i-1]).Seconds()-10)
	}
	got := float64(admitted.Load())
	t.Logf("admitted %d of %d over %v (one quota: %.1f, of it %.1f refilled in pauses of the demand)", admitted.Load(), decisions.Load(), last.Sub(first), want, unused)
	if got < (want-unused)*0.97 || got > want*1.03 {
		t.Fatalf("two replicas admitted %d, want %.0f - %.0f (unused) - 3%% to %.0f + 3%% (one shared quota)", admitted.Load(), want, unused, want)
	}
	var rts int64
	for _, h := range hooks {
		n, _ := h.take()
		rts += n
	}
	if rts != decisions.Load() {
		t.Fatalf("%d round trips for %d decisions, want one each", rts, decisions.Load())
	}
	for _, a := range reps {
		if f := a.Status().Fallbacks; f != 0 {
			t.Fatalf("%d fallback decisions with Redis up", f)
		}
	}
}

// TestRedisOneRoundTripPerDecision checks Enter and AdmitMiss with every
// limit set, and that nothing at all is sent for unlimited tenants.
func TestRedisOneRoundTripPerDecision(t *testing.T) {
	srv := testenv.StartRedis(t)
	c := newClient(t, srv, testTimeout)
	h := &countHook{}
	c.AddHook(h)
	cfg := redisConfig(nil)
	cfg.Global = Limits{RPS: 1000, Burst: 100, TokensPerMinute: 1e7}
	a := mustNew(t, cfg, map[string]Limits{
		"acme": {RPS: 1000, Burst: 100, TokensPerMinute: 1e6, MaxConcurrency: 10},
		"free": {},
	}, c)
	h.take()
	ctx := context.Background()
	for i := 0; i < 5; i++ {
		p, rej := a.Enter(ctx, "acme")
		if rej != nil {
			t.Fatal(rej)
		}
		if n, cmds := h.take(); n != 1 {
			t.Fatalf("Enter: %d round trips %v, want 1", n, cmds)
		}
		ch, rej := a.AdmitMiss(ctx, "acme", 500)
		if rej != nil {
			t.Fatal(rej)
		}
		if n, cmds := h.take(); n != 1 {
			t.Fatalf("AdmitMiss: %d round trips %v, want 1", n, cmds)
		}
		ch.Settle(200)
		if n, cmds := h.take(); n != 1 {
			t.Fatalf("Settle: %d round trips %v, want 1", n, cmds)
		}
		p.Release()
		if n, cmds := h.take(); n != 1 {
			t.Fatalf("Release: %d round trips %v, want 1", n, cmds)
		}
	}
	// A tenant without limits and no global limits: no Redis at all.
	b := mustNew(t, redisConfig(nil), map[string]Limits{"free": {}}, c)
	h.take()
	for _, name := range []string{"free", "default"} {
		p, rej := b.Enter(ctx, name)
		if rej != nil {
			t.Fatal(rej)
		}
		ch, rej := b.AdmitMiss(ctx, name, 1000)
		if rej != nil {
			t.Fatal(rej)
		}
		ch.Settle(10)
		p.Release()
	}
	if n, cmds := h.take(); n != 0 {
		t.Fatalf("unlimited requests made %d round trips %v, want 0", n, cmds)
	}
}

func TestRedisTokenBudget(t *testing.T) {
	srv := testenv.StartRedis(t)
	clk := testenv.NewClock()
	cfg := redisConfig(clk)
	cfg.Global = Limits{TokensPerMinute: 5000}
	a := mustNew(t, cfg, map[string]Limits{"acme": {TokensPerMinute: 1000}}, newClient(t, srv, testTimeout))
	testTokenBudget(t, a, clk)
	if f := a.Status().Fallbacks; f != 0 {
		t.Fatalf("%d fallback decisions with Redis up", f)
	}
}

func TestRedisHitsNeverTouchMissBudgets(t *testing.T) {
	srv := testenv.StartRedis(t)
	c := newClient(t, srv, testTimeout)
	cfg := redisConfig(nil)
	cfg.Global = Limits{RPS: 1, Burst: 1, TokensPerMinute: 100}
	a := mustNew(t, cfg, map[string]Limits{"acme": {RPS: 1000, Burst: 1000, TokensPerMinute: 100, MaxConcurrency: 5}}, c)
	ctx := context.Background()
	for i := 0; i < 200; i++ {
		p, rej := a.Enter(ctx, "acme")
		if rej != nil {
			t.Fatalf("hit %d: %v", i, rej)
		}
		p.Release()
	}
	keys, err := c.Keys(ctx, "fd:a:{g}*").Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != 0 {
		t.Fatalf("hits wrote token or global keys: %v", keys)
	}
	if _, rej := a.AdmitMiss(ctx, "acme", 100); rej != nil {
		t.Fatalf("first miss: %v", rej)
	}
	if _, rej := a.AdmitMiss(ctx, "other", 0); rej == nil || rej.Limit != LimitGlobalRPS {
		t.Fatalf("second miss: %+v, want global_rps", rej)
	}
	keys, _ = c.Keys(ctx, "fd:a:*").Result()
	for _, k := range keys {
		if ttl := c.PTTL(ctx, k).Val(); ttl <= 0 {
			t.Errorf("key %s has no expiry (%v)", k, ttl)
		}
	}
}

func TestRedisConcurrencyStress(t *testing.T) {
	srv := testenv.StartRedis(t)
	stressRedis(t, func(t *testing.T, h *faultHook) redis.UniversalClient {
		c := newClient(t, srv, time.Second)
		c.AddHook(h)
		return c
	})
}

// TestRedisLeaseExpiresAfterCrash: a replica that dies holding a slot
// frees it after LeaseTTL; one that lives renews it.
func TestRedisLeaseExpiresAfterCrash(t *testing.T) {
	srv := testenv.StartRedis(t)
	clk := testenv.NewClock()
	cfg := redisConfig(clk)
	cfg.LeaseTTL = 10 * time.Second
	tenants := map[string]Limits{"acme": {MaxConcurrency: 1}}
	ctx := context.Background()

	alive := mustNew(t, cfg, tenants, newClient(t, srv, testTimeout))
	crashed := mustNew(t, cfg, tenants, newClient(t, srv, testTimeout))
	if _, rej := crashed.Enter(ctx, "acme"); rej != nil {
		t.Fatal(rej)
	}
	_ = crashed.Close() // dies without releasing: no more renewals
	if _, rej := alive.Enter(ctx, "acme"); rej == nil || rej.Limit != LimitTenantConcurrency {
		t.Fatalf("slot taken by the crashed replica: %+v, want tenant_concurrency", rej)
	}
	clk.Advance(9 * time.Second)
	if _, rej := alive.Enter(ctx, "acme"); rej == nil {
		t.Fatal("admitted before the lease expired")
	}
	clk.Advance(1100 * time.Millisecond)
	p, rej := alive.Enter(ctx, "acme")
	if rej != nil {
		t.Fatalf("the crashed replica's lease did not expire: %v", rej)
	}

	// A live replica's lease outlives the TTL through renewals.
	for i := 0; i < 3; i++ {
		clk.Advance(6 * time.Second)
		if err := alive.rs.renew(); err != nil {
			t.Fatal(err)
		}
	}
	other := mustNew(t, cfg, tenants, newClient(t, srv, testTimeout))
	if _, rej := other.Enter(ctx, "acme"); rej == nil {
		t.Fatal("a renewed lease was taken over after 18s")
	}
	p.Release()
	q, rej := other.Enter(ctx, "acme")
	if rej != nil {
		t.Fatalf("after release: %v", rej)
	}
	q.Release()
}

// TestRedisOutageFallback: with Redis killed, rate and token decisions are
// made locally at quota ÷ replicas and counted, and a capped tenant is
// refused; after a restart they go back to Redis.
func TestRedisOutageFallback(t *testing.T) {
	srv := testenv.StartRedis(t)
	c := newClient(t, srv, 50*time.Millisecond)
	clk := testenv.NewClock()
	cfg := redisConfig(clk) // replicas: 2
	cfg.RedisRetry = 100 * time.Millisecond
	cfg.Global = Limits{RPS: 100, Burst: 20, TokensPerMinute: 6000}
	a := mustNew(t, cfg, map[string]Limits{"acme": {RPS: 10, Burst: 4, TokensPerMinute: 1000}, "capped": {MaxConcurrency: 4}}, c)
	ctx := context.Background()
	p, rej := a.Enter(ctx, "acme")
	if rej != nil {
		t.Fatal(rej)
	}
	p.Release()

	srv.Kill()
	// Local share: burst 2, 500 tokens a minute; no slot for the capped.
	admitted := 0
	for i := 0; i < 5; i++ {
		p, rej := a.Enter(ctx, "acme")
		if rej == nil {
			admitted++
			p.Release()
		} else if rej.Limit != LimitTenantRPS {
			t.Fatalf("limit %q", rej.Limit)
		}
	}
	if admitted != 2 {
		t.Fatalf("admitted %d of 5 on the fallback, want 2 (burst 4 ÷ 2 replicas)", admitted)
	}
	clk.Advance(time.Second)
	var passes []*Pass
	for i := 0; i < 2; i++ {
		p, rej := a.Enter(ctx, "acme")
		if rej != nil {
			t.Fatal(rej)
		}
		passes = append(passes, p)
	}
	_, rej = a.Enter(ctx, "capped")
	wantUnshared(t, rej, "a capped tenant on the fallback")
	if _, rej := a.AdmitMiss(ctx, "acme", 400); rej != nil {
		t.Fatalf("miss on the fallback: %v", rej)
	}
	if _, rej := a.AdmitMiss(ctx, "acme", 200); rej == nil || rej.Limit != LimitTenantTokens {
		t.Fatalf("second miss on the fallback: %+v, want tenant_tokens (1000 ÷ 2)", rej)
	}
	// The fallback share never makes a request that fits the real quota
	// impossible: 800 tokens wait for a full local bucket.
	clk.Advance(time.Minute)
	if _, rej := a.AdmitMiss(ctx, "acme", 800); rej != nil {
		t.Fatalf("800 of 1000 tokens on a full fallback bucket of 500: %v", rej)
	}
	st := a.Status()
	if st.Redis != "down" || st.Fallbacks < 10 || st.CapRefusals != 1 {
		t.Fatalf("Status = %+v, want redis down, >= 10 fallback decisions and 1 capped request refused", st)
	}
	for _, p := range passes {
		p.Release()
	}
	if a.Inflight("acme") != 0 {
		t.Fatalf("Inflight = %d", a.Inflight("acme"))
	}

	srv.Start()
	deadline := time.Now().Add(5 * time.Second)
	for {
		p, rej := a.Enter(ctx, "acme")
		if rej == nil {
			p.Release()
		}
		if n, _ := c.Exists(ctx, (*a.tenants.Load())["acme"].rpsKey).Result(); n == 1 {
			break // a decision reached the restarted (empty) Redis
		}
		if time.Now().After(deadline) {
			t.Fatalf("decisions did not go back to Redis within 5s: %+v", a.Status())
		}
		time.Sleep(20 * time.Millisecond)
	}
	before := a.Status().Fallbacks
	clk.Advance(time.Second) // refill the (new) Redis bucket
	for i := 0; i < 3; i++ {
		p, rej := a.Enter(ctx, "acme")
		if rej != nil {
			t.Fatalf("after recovery: %v", rej)
		}
		p.Release()
	}
	if st := a.Status(); st.Fallbacks != before || st.Redis != "up" {
		t.Fatalf("after recovery: %+v (fallbacks were %d)", st, before)
	}
}

func TestRedisDownAtStart(t *testing.T) {
	srv := testenv.StartRedis(t)
	c := newClient(t, srv, 50*time.Millisecond)
	srv.Kill()
	a := mustNew(t, redisConfig(nil), map[string]Limits{"acme": {RPS: 100}, "capped": {RPS: 100, MaxConcurrency: 2}}, c)
	p, rej := a.Enter(context.Background(), "acme")
	if rej != nil {
		t.Fatal(rej)
	}
	p.Release()
	_, rej = a.Enter(context.Background(), "capped")
	wantUnshared(t, rej, "a capped tenant with Redis down")
	if st := a.Status(); st.Redis != "down" || st.Fallbacks != 1 || st.CapRefusals != 1 {
		t.Fatalf("Status = %+v, want down with 1 fallback decision and 1 capped request refused", st)
	}
}

func TestRedisMaxWait(t *testing.T) {
	srv := testenv.StartRedis(t)
	cfg := redisConfig(nil)
	cfg.MaxWait = 300 * time.Millisecond
	a := mustNew(t, cfg, map[string]Limits{"acme": {RPS: 10, Burst: 1, MaxConcurrency: 1}}, newClient(t, srv, testTimeout))
	ctx := context.Background()
	p1, rej := a.Enter(ctx, "acme")
	if rej != nil {
		t.Fatal(rej)
	}
	// A slot held in Redis is polled for: freed after 50ms, then the rate
	// reservation (100ms after the first request) is waited for.
	time.AfterFunc(50*time.Millisecond, p1.Release)
	start := time.Now()
	p2, rej := a.Enter(ctx, "acme")
	if rej != nil {
		t.Fatalf("within max_wait: %v", rej)
	}
	if el := time.Since(start); el < 80*time.Millisecond || el > 290*time.Millisecond {
		t.Fatalf("waited %v, want about 100ms", el)
	}
	// Held for longer than max_wait: rejected after max_wait.
	start = time.Now()
	_, rej = a.Enter(ctx, "acme")
	if rej == nil || rej.Limit != LimitTenantConcurrency {
		t.Fatalf("rejection %+v, want tenant_concurrency", rej)
	}
	if el := time.Since(start); el < 250*time.Millisecond {
		t.Fatalf("rejected after %v, before max_wait", el)
	}
	p2.Release()
}

var _ redis.Hook = (*countHook)(nil)
