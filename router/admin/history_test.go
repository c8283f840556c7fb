package admin

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"frontdoor/balancer"
)

// countingGateway is a Gateway whose counters a test moves by hand.
type countingGateway struct {
	Gateway
	pool *balancer.Pool
	mu   sync.Mutex
	c    Counters
}

func (g *countingGateway) Pool() *balancer.Pool { return g.pool }

func (g *countingGateway) Counters(time.Time) Counters {
	g.mu.Lock()
	defer g.mu.Unlock()
	c := g.c
	c.Tenants = map[string]TenantCounters{}
	for k, v := range g.c.Tenants {
		c.Tenants[k] = v
	}
	return c
}

func (g *countingGateway) add(f func(c *Counters)) {
	g.mu.Lock()
	f(&g.c)
	g.mu.Unlock()
}

type historyDoc struct {
	Step    float64               `json:"step_seconds"`
	T       []int64               `json:"t"`
	Series  map[string][]*float64 `json:"series"`
	Tenants []TenantRow           `json:"tenants"`
}

// The ring keeps the last window's points, oldest first, each the
// difference of two readings over the step; a reading that goes back (a
// counter that restarted) counts as nothing, never as a negative rate.
func TestHistoryRing(t *testing.T) {
	pool, err := balancer.New(balancer.DefaultConfig(), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	gw := &countingGateway{pool: pool, c: Counters{Tenants: map[string]TenantCounters{}}}
	h := NewHistory(100*time.Millisecond, 300*time.Millisecond) // 3 points
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); h.Run(ctx, gw) }()
	defer func() { cancel(); <-done }()

	read := func() historyDoc {
		var d historyDoc
		if err := json.Unmarshal(h.AppendJSON(nil, 0), &d); err != nil {
			t.Fatal(err)
		}
		return d
	}
	// Requests go up by 10 between readings, then the counter goes back.
	deadline := time.Now().Add(10 * time.Second)
	for n := 0; ; n++ {
		gw.add(func(c *Counters) {
			c.Requests += 10
			c.Errors5xx += 1
			c.Tenants["a"] = TenantCounters{Requests: c.Requests, Hits: c.Requests / 2, Lookups: c.Requests}
		})
		time.Sleep(120 * time.Millisecond)
		if d := read(); len(d.T) == 3 && n > 6 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the ring never filled: %+v", read())
		}
	}
	d := read()
	if len(d.T) != 3 || d.T[0] > d.T[1] || d.T[1] > d.T[2] {
		t.Fatalf("a full ring of 3 is 3 points, oldest first: %v", d.T)
	}
	for i, v := range d.Series["err_5xx"] {
		if v == nil || *v < 0 || *v > 0.2 {
			t.Fatalf("5xx share of point %d: %v (1 in 10 requests)", i, v)
		}
	}
	if len(d.Tenants) != 1 || d.Tenants[0].Name != "a" || d.Tenants[0].Requests <= 0 || d.Tenants[0].HitRate < 0.4 || d.Tenants[0].HitRate > 0.6 {
		t.Fatalf("tenant rows: %+v", d.Tenants)
	}
	gw.add(func(c *Counters) { c.Requests = 0 })
	time.Sleep(250 * time.Millisecond)
	for i, v := range read().Series["rps"] {
		if v == nil || *v < 0 {
			t.Fatalf("rps of point %d after the counter went back: %v", i, v)
		}
	}
}
