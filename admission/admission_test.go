package admission

import (
	"bytes"
	"context"
	"frontdoor/internal/testenv"
	"strings"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"
)

func TestLocalTokenBucketAccuracy(t *testing.T) {
	clk := testenv.NewClock()
	a := mustNew(t, Config{Clock: clk.Now}, map[string]Limits{"acme": {RPS: 50, Burst: 10}}, nil)
	ctx := context.Background()
	admitted := 0
	// 200 requests/s for a simulated 10 s.
	for i := 0; i < 2000; i++ {
		p, rej := a.Enter(ctx, "acme")
		if rej == nil {
			admitted++
			p.Release()
		} else {
			if rej.Limit != LimitTenantRPS {
				t.Fatalf("limit = %q, want %q", rej.Limit, LimitTenantRPS)
			}
			// The bucket refills one request every 20ms.
			if rej.RetryAfter <= 0 || rej.RetryAfter > 20*time.Millisecond || rej.RetryAfterSeconds() != 1 {
				t.Fatalf("RetryAfter = %v (%ds), want (0, 20ms] and 1s", rej.RetryAfter, rej.RetryAfterSeconds())
			}
		}
		clk.Advance(5 * time.Millisecond)
	}
	if !within(float64(admitted), 510, 0.03) {
		t.Fatalf("admitted %d over 10s at rps 50 burst 10, want 510 ± 3%%", admitted)
	}
}

func TestRetryAfterValues(t *testing.T) {
	clk := testenv.NewClock()
	a := mustNew(t, Config{Clock: clk.Now}, map[string]Limits{
		"slow":   {RPS: 0.1, Burst: 1},
		"tokens": {TokensPerMinute: 600},
	}, nil)
	ctx := context.Background()
	p, rej := a.Enter(ctx, "slow")
	if rej != nil {
		t.Fatalf("first request rejected: %v", rej)
	}
	p.Release()
	for _, step := range []struct {
		advance time.Duration
		want    int
	}{{0, 10}, {4 * time.Second, 6}, {5500 * time.Millisecond, 1}} {
		clk.Advance(step.advance)
		_, rej = a.Enter(ctx, "slow")
		if rej == nil || rej.Limit != LimitTenantRPS || rej.RetryAfterSeconds() != step.want {
			t.Fatalf("after +%v: rejection %+v, want tenant_rps with Retry-After %ds", step.advance, rej, step.want)
		}
	}
	clk.Advance(500 * time.Millisecond)
	if p, rej = a.Enter(ctx, "slow"); rej != nil {
		t.Fatalf("rejected once the bucket refilled: %v", rej)
	}
	p.Release()

	// Tokens: 600 a minute refill 10 a second.
	if _, rej := a.AdmitMiss(ctx, "tokens", 600); rej != nil {
		t.Fatalf("first miss rejected: %v", rej)
	}
	_, rej = a.AdmitMiss(ctx, "tokens", 100)
	if rej == nil || rej.Limit != LimitTenantTokens || rej.RetryAfter != 10*time.Second || rej.RetryAfterSeconds() != 10 {
		t.Fatalf("rejection %+v, want tenant_tokens after 10s", rej)
	}
	clk.Advance(2500 * time.Millisecond)
	if _, rej = a.AdmitMiss(ctx, "tokens", 100); rej == nil || rej.RetryAfterSeconds() != 8 {
		t.Fatalf("rejection %+v, want Retry-After 8 (7.5s rounded up)", rej)
	}
	if !strings.Contains(rej.Message, `"tokens"`) || !strings.Contains(rej.Message, "retry after 8s") {
		t.Fatalf("message %q should name the tenant and the wait", rej.Message)
	}
}

func TestRetryAfterSeconds(t *testing.T) {
	for _, c := range []struct {
		d    time.Duration
		want int
	}{{0, 1}, {-time.Second, 1}, {time.Millisecond, 1}, {time.Second, 1}, {time.Second + time.Millisecond, 2}, {2 * time.Second, 2}, {59500 * time.Millisecond, 60}} {
		if got := (&Rejection{RetryAfter: c.d}).RetryAfterSeconds(); got != c.want {
			t.Errorf("RetryAfterSeconds(%v) = %d, want %d", c.d, got, c.want)
		}
	}
}

// testTokenBudget runs the token-bucket checks against a (local or redis)
// admitter whose clock is clk: tenant "acme" has 1000 tokens a minute and
// the global budget is 5000.
func testTokenBudget(t *testing.T, a *Admitter, clk *testenv.Clock) {
	ctx := context.Background()
	_, rej := a.AdmitMiss(ctx, "acme", 1001)
	if rej == nil || rej.Limit != LimitTenantTokens || !rej.Oversize {
		t.Fatalf("1001 tokens against 1000/min: %+v, want an oversize tenant_tokens rejection", rej)
	}
	if _, rej = a.AdmitMiss(ctx, "other", 5001); rej == nil || rej.Limit != LimitGlobalTokens || !rej.Oversize {
		t.Fatalf("5001 tokens against a global 5000/min: %+v, want an oversize global_tokens rejection", rej)
	}
	c, rej := a.AdmitMiss(ctx, "acme", 900)
	if rej != nil {
		t.Fatalf("900 of 1000: %v", rej)
	}
	_, rej = a.AdmitMiss(ctx, "acme", 500)
	if rej == nil || rej.Limit != LimitTenantTokens || rej.Oversize {
		t.Fatalf("500 more: %+v, want tenant_tokens", rej)
	}
	// 400 missing at 1000/60 a second: 24s.
	if rej.RetryAfter < 23*time.Second || rej.RetryAfter > 25*time.Second {
		t.Fatalf("RetryAfter = %v, want about 24s", rej.RetryAfter)
	}
	// The response used 300: 600 come back, so 500 now fit.
	c.Settle(300)
	c.Settle(0) // idempotent: no second refund
	c2, rej := a.AdmitMiss(ctx, "acme", 500)
	if rej != nil {
		t.Fatalf("500 after the refund: %v", rej)
	}
	// Left: 1000-300-500 = 200. A response that used 450 instead of 100
	// charges 350 more... so 150 tokens no longer fit.
	c3, rej := a.AdmitMiss(ctx, "acme", 100)
	if rej != nil {
		t.Fatalf("100 of the 200 left: %v", rej)
	}
	c3.Settle(450)
	if _, rej = a.AdmitMiss(ctx, "acme", 50); rej == nil || rej.Limit != LimitTenantTokens {
		t.Fatalf("50 after an extra charge of 350 (budget in debt): %+v, want tenant_tokens", rej)
	}
	c2.Settle(-1) // unknown usage: the estimate stands
	// The debt (-250) is paid back before the budget is full again: after
	// one minute 750 are there, after 80s all 1000.
	clk.Advance(time.Minute)
	if _, rej = a.AdmitMiss(ctx, "acme", 1000); rej == nil || rej.RetryAfterSeconds() != 15 {
		t.Fatalf("a full budget one minute after a debt of 250: %+v, want a wait of 15s", rej)
	}
	clk.Advance(20 * time.Second)
	if _, rej = a.AdmitMiss(ctx, "acme", 1000); rej != nil {
		t.Fatalf("a full budget after 80s: %v", rej)
	}
}

func TestLocalTokenBudget(t *testing.T) {
	clk := testenv.NewClock()
	a := mustNew(t, Config{Clock: clk.Now, Global: Limits{TokensPerMinute: 5000}},
		map[string]Limits{"acme": {TokensPerMinute: 1000}}, nil)
	testTokenBudget(t, a, clk)
}

func TestHitsNeverTouchMissBudgets(t *testing.T) {
	clk := testenv.NewClock()
	a := mustNew(t, Config{Clock: clk.Now, Global: Limits{RPS: 1, Burst: 1, TokensPerMinute: 100}},
		map[string]Limits{"acme": {TokensPerMinute: 100}}, nil)
	ctx := context.Background()
	for i := 0; i < 1000; i++ { // cache hits: Enter only
		p, rej := a.Enter(ctx, "acme")
		if rej != nil {
			t.Fatalf("hit %d rejected: %v", i, rej)
		}
		p.Release()
	}
	// The global burst of 1 and both token budgets are untouched.
	if _, rej := a.AdmitMiss(ctx, "acme", 100); rej != nil {
		t.Fatalf("first miss after 1000 hits: %v", rej)
	}
	if _, rej := a.AdmitMiss(ctx, "other", 0); rej == nil || rej.Limit != LimitGlobalRPS {
		t.Fatalf("second miss: %+v, want global_rps", rej)
	}
	// The tenant request rate does count hits.
	b := mustNew(t, Config{Clock: clk.Now}, map[string]Limits{"acme": {RPS: 1, Burst: 2}}, nil)
	for i := 0; i < 2; i++ {
		p, rej := b.Enter(ctx, "acme")
		if rej != nil {
			t.Fatal(rej)
		}
		p.Release()
	}
	if _, rej := b.Enter(ctx, "acme"); rej == nil || rej.Limit != LimitTenantRPS {
		t.Fatalf("third hit: %+v, want tenant_rps", rej)
	}
}

func TestUnknownTenantCountsInflight(t *testing.T) {
	a := mustNew(t, Config{}, map[string]Limits{"acme": {RPS: 10}}, nil)
	ctx := context.Background()
	p1, _ := a.Enter(ctx, "default")
	p2, _ := a.Enter(ctx, "default")
	if got := a.Inflight("default"); got != 2 {
		t.Fatalf("Inflight = %d, want 2", got)
	}
	p1.Release()
	p1.Release()
	if got := a.Inflight("default"); got != 1 {
		t.Fatalf("Inflight after a double release = %d, want 1", got)
	}
	p2.Release()
	var nilPass *Pass
	nilPass.Release()
	var nilCharge *Charge
	nilCharge.Settle(10)
	if got := a.Inflight("default"); got != 0 {
		t.Fatalf("Inflight = %d, want 0", got)
	}
	if c, rej := a.AdmitMiss(ctx, "default", 1e6); rej != nil || c.Tokens() != 0 {
		t.Fatalf("unlimited miss: %v %v", c, rej)
	}
	if st := a.Status(); st.Backend != BackendLocal || st.Inflight["default"] != 0 || st.Inflight["acme"] != 0 {
		t.Fatalf("Status = %+v", st)
	}
}

func TestLocalMaxWait(t *testing.T) {
	ctx := context.Background()
	t.Run("rate admitted within max_wait", func(t *testing.T) {
		clk := testenv.NewClock()
		a := mustNew(t, Config{Clock: clk.Now, MaxWait: 150 * time.Millisecond}, map[string]Limits{"acme": {RPS: 10, Burst: 1}}, nil)
		slept := fakeSleep(a, clk)
		p1, rej := a.Enter(ctx, "acme")
		if rej != nil {
			t.Fatal(rej)
		}
		p2, rej := a.Enter(ctx, "acme")
		if rej != nil {
			t.Fatalf("second request within max_wait: %v", rej)
		}
		if len(*slept) != 1 || (*slept)[0] != 100*time.Millisecond {
			t.Fatalf("slept %v, want [100ms]", *slept)
		}
		// The clock moved on by the wait: the third waits 100ms too.
		p3, rej := a.Enter(ctx, "acme")
		if rej != nil {
			t.Fatalf("third: %v", rej)
		}
		p1.Release()
		p2.Release()
		p3.Release()
	})
	t.Run("rate rejected beyond max_wait", func(t *testing.T) {
		clk := testenv.NewClock()
		a := mustNew(t, Config{Clock: clk.Now, MaxWait: 50 * time.Millisecond}, map[string]Limits{"acme": {RPS: 10, Burst: 1}}, nil)
		slept := fakeSleep(a, clk)
		p, _ := a.Enter(ctx, "acme")
		defer p.Release()
		_, rej := a.Enter(ctx, "acme")
		if rej == nil || rej.Limit != LimitTenantRPS || rej.RetryAfter != 100*time.Millisecond {
			t.Fatalf("rejection %+v, want tenant_rps after 100ms", rej)
		}
		if len(*slept) != 0 {
			t.Fatalf("slept %v before a rejection known at once", *slept)
		}
	})
	t.Run("miss waits for global capacity", func(t *testing.T) {
		clk := testenv.NewClock()
		a := mustNew(t, Config{Clock: clk.Now, MaxWait: time.Second, Global: Limits{RPS: 2, Burst: 1}}, nil, nil)
		slept := fakeSleep(a, clk)
		for i := 0; i < 3; i++ {
			if _, rej := a.AdmitMiss(ctx, "x", 10); rej != nil {
				t.Fatalf("miss %d: %v", i, rej)
			}
		}
		if len(*slept) != 2 || (*slept)[0] != 500*time.Millisecond || (*slept)[1] != 500*time.Millisecond {
			t.Fatalf("slept %v, want [500ms 500ms]", *slept)
		}
		if _, rej := a.AdmitMiss(ctx, "x", 10); rej != nil {
			t.Fatalf("fourth: %v", rej)
		}
		a.cfg.MaxWait = 0
		if _, rej := a.AdmitMiss(ctx, "x", 10); rej == nil || rej.Limit != LimitGlobalRPS {
			t.Fatalf("fifth: %+v, want global_rps", rej)
		}
	})
	t.Run("real time: rate", func(t *testing.T) {
		a := mustNew(t, Config{MaxWait: 300 * time.Millisecond}, map[string]Limits{"acme": {RPS: 10, Burst: 1}}, nil)
		p1, _ := a.Enter(ctx, "acme")
		start := time.Now()
		p2, rej := a.Enter(ctx, "acme")
		if rej != nil {
			t.Fatal(rej)
		}
		if el := time.Since(start); el < 80*time.Millisecond || el > 290*time.Millisecond {
			t.Fatalf("waited %v, want about 100ms", el)
		}
		p1.Release()
		p2.Release()
	})
	t.Run("real time: concurrency slot freed in time", func(t *testing.T) {
		a := mustNew(t, Config{MaxWait: 2 * time.Second}, map[string]Limits{"acme": {MaxConcurrency: 1}}, nil)
		p1, _ := a.Enter(ctx, "acme")
		time.AfterFunc(50*time.Millisecond, p1.Release)
		start := time.Now()
		p2, rej := a.Enter(ctx, "acme")
		if rej != nil {
			t.Fatal(rej)
		}
		if el := time.Since(start); el < 40*time.Millisecond || el > time.Second {
			t.Fatalf("waited %v, want about 50ms (woken by the release)", el)
		}
		p2.Release()
	})
	t.Run("real time: concurrency slot not freed in time", func(t *testing.T) {
		a := mustNew(t, Config{MaxWait: 30 * time.Millisecond}, map[string]Limits{"acme": {MaxConcurrency: 1}}, nil)
		p1, _ := a.Enter(ctx, "acme")
		defer p1.Release()
		start := time.Now()
		_, rej := a.Enter(ctx, "acme")
		if rej == nil || rej.Limit != LimitTenantConcurrency || rej.RetryAfterSeconds() != 1 {
			t.Fatalf("rejection %+v, want tenant_concurrency", rej)
		}
		if el := time.Since(start); el < 25*time.Millisecond {
			t.Fatalf("rejected after %v, want after max_wait (30ms)", el)
		}
		if a.Inflight("acme") != 1 {
			t.Fatalf("Inflight = %d, want 1", a.Inflight("acme"))
		}
	})
	t.Run("client gone while waiting gives the reservation back", func(t *testing.T) {
		clk := testenv.NewClock()
		a := mustNew(t, Config{Clock: clk.Now, MaxWait: time.Second}, map[string]Limits{"acme": {RPS: 10, Burst: 1}}, nil)
		p, _ := a.Enter(ctx, "acme")
		p.Release()
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		a.sleep = sleepCtx
		_, rej := a.Enter(cctx, "acme")
		if rej == nil || rej.Limit != LimitTenantRPS || !strings.Contains(rej.Message, "gave up") {
			t.Fatalf("rejection %+v, want tenant_rps (gave up)", rej)
		}
		// The reservation was refunded: after 100ms one request fits at once.
		clk.Advance(100 * time.Millisecond)
		a.cfg.MaxWait = 0
		if p, rej = a.Enter(ctx, "acme"); rej != nil {
			t.Fatalf("after the refund: %v", rej)
		}
		p.Release()
		if a.Inflight("acme") != 0 {
			t.Fatalf("Inflight = %d", a.Inflight("acme"))
		}
	})
}

func TestMetrics(t *testing.T) {
	clk := testenv.NewClock()
	a := mustNew(t, Config{Clock: clk.Now}, map[string]Limits{"acme": {RPS: 1, Burst: 1}}, nil)
	set := metrics.NewSet()
	a.RegisterMetrics(set)
	ctx := context.Background()
	p, _ := a.Enter(ctx, "acme")
	_, rej := a.Enter(ctx, "acme")
	if rej == nil {
		t.Fatal("second request admitted")
	}
	q, _ := a.Enter(ctx, `we"ird`)
	var buf bytes.Buffer
	set.WritePrometheus(&buf)
	out := buf.String()
	for _, want := range []string{
		`frontdoor_admission_rejected_total{tenant="acme",limit="tenant_rps"} 1`,
		`frontdoor_tenant_inflight{tenant="acme"} 1`,
		`frontdoor_tenant_inflight{tenant="we\"ird"} 1`,
		`frontdoor_admission_wait_seconds_count 2`,
		`frontdoor_admission_fallback_total 0`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("metrics lack %s:\n%s", want, out)
		}
	}
	p.Release()
	q.Release()
}

func TestEscapeKey(t *testing.T) {
	for in, want := range map[string]string{"acme": "acme", "a.b-c_d9": "a.b-c_d9", "{x}": "%7Bx%7D", "a b:c": "a%20b%3Ac"} {
		if got := escapeKey(in); got != want {
			t.Errorf("escapeKey(%q) = %q, want %q", in, got, want)
		}
	}
	ts := newTenantState("{evil}", Limits{RPS: 1}, "fd:a:")
	if ts.rpsKey != "fd:a:{t:%7Bevil%7D}:rps" || ts.tpmKey != "fd:a:{g}:tpm:%7Bevil%7D" {
		t.Fatalf("keys %q %q", ts.rpsKey, ts.tpmKey)
	}
}

func TestNewRejectsBadConfig(t *testing.T) {
	if _, err := New(Config{Backend: "memcached"}, nil, nil); err == nil {
		t.Error("unknown backend accepted")
	}
	if _, err := New(Config{Backend: BackendRedis}, nil, nil); err == nil {
		t.Error("redis backend without a client accepted")
	}
	if _, err := New(Config{}, map[string]Limits{"x": {RPS: -1}}, nil); err == nil {
		t.Error("negative rps accepted")
	}
}

func TestUpfrontTokens(t *testing.T) {
	a := mustNew(t, Config{DefaultMaxTokens: 1024}, nil, nil)
	if got := a.UpfrontTokens(100, 0, 0); got != 1124 {
		t.Errorf("no max_tokens: %d, want 1124", got)
	}
	if got := a.UpfrontTokens(100, 50, 3); got != 250 {
		t.Errorf("max_tokens 50, n 3: %d, want 250", got)
	}
}

func TestLimitsDivide(t *testing.T) {
	got := Limits{RPS: 50, Burst: 10, TokensPerMinute: 1001, MaxConcurrency: 5}.divide(2)
	want := Limits{RPS: 25, Burst: 5, TokensPerMinute: 501} // no local share of a cap
	if got != want {
		t.Fatalf("divide(2) = %+v, want %+v", got, want)
	}
	if got := (Limits{RPS: 1}).divide(4); got.Burst != 1 || got.RPS != 0.25 {
		t.Fatalf("divide(4) of rps 1 = %+v", got)
	}
}
