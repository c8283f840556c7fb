package admission

import (
	"context"
	"testing"

	"frontdoor/internal/testenv"
)

// Benchmarks run one goroutine: ns/op is the latency of a decision. The
// limits are high enough never to refuse.

func BenchmarkEnterLocalUnlimited(b *testing.B) {
	a := mustNew(b, Config{}, nil, nil)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		p, _ := a.Enter(ctx, "default")
		p.Release()
	}
}

func BenchmarkEnterLocal(b *testing.B) {
	a := mustNew(b, Config{}, map[string]Limits{"acme": {RPS: 1e12, Burst: 1e9, MaxConcurrency: 1e6}}, nil)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		p, rej := a.Enter(ctx, "acme")
		if rej != nil {
			b.Fatal(rej)
		}
		p.Release()
	}
}

func BenchmarkAdmitMissLocal(b *testing.B) {
	a := mustNew(b, Config{Global: Limits{RPS: 1e12, Burst: 1e9, TokensPerMinute: 1e15}},
		map[string]Limits{"acme": {TokensPerMinute: 1e15}}, nil)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		c, rej := a.AdmitMiss(ctx, "acme", 1500)
		if rej != nil {
			b.Fatal(rej)
		}
		c.Settle(1200)
	}
}

func BenchmarkEnterRedis(b *testing.B) {
	srv := testenv.StartRedis(b)
	c := newClient(b, srv, testTimeout)
	h := &countHook{}
	c.AddHook(h)
	cfg := redisConfig(nil)
	b.Run("rps", func(b *testing.B) {
		a := mustNew(b, cfg, map[string]Limits{"acme": {RPS: 1e9, Burst: 1e9}}, c)
		benchEnterRedis(b, a, h)
	})
	b.Run("rps+concurrency", func(b *testing.B) {
		a := mustNew(b, cfg, map[string]Limits{"acme": {RPS: 1e9, Burst: 1e9, MaxConcurrency: 1e6}}, c)
		benchEnterRedis(b, a, h)
	})
}

func benchEnterRedis(b *testing.B, a *Admitter, h *countHook) {
	ctx := context.Background()
	h.take()
	b.ReportAllocs()
	for b.Loop() {
		p, rej := a.Enter(ctx, "acme")
		if rej != nil {
			b.Fatal(rej)
		}
		p.Release()
	}
	n, _ := h.take()
	b.ReportMetric(float64(n)/float64(b.N), "roundtrips/op")
	if f := a.Status().Fallbacks; f != 0 {
		b.Fatalf("%d fallback decisions", f)
	}
}

func BenchmarkAdmitMissRedis(b *testing.B) {
	srv := testenv.StartRedis(b)
	c := newClient(b, srv, testTimeout)
	h := &countHook{}
	c.AddHook(h)
	cfg := redisConfig(nil)
	cfg.Global = Limits{RPS: 1e9, Burst: 1e9, TokensPerMinute: 1e15}
	a := mustNew(b, cfg, map[string]Limits{"acme": {TokensPerMinute: 1e15}}, c)
	ctx := context.Background()
	h.take()
	b.ReportAllocs()
	for b.Loop() {
		ch, rej := a.AdmitMiss(ctx, "acme", 1500)
		if rej != nil {
			b.Fatal(rej)
		}
		ch.Settle(1200)
	}
	n, _ := h.take()
	b.ReportMetric(float64(n)/float64(b.N), "roundtrips/op")
}
