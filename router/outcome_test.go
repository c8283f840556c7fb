package router

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"frontdoor/cache"
	sim "frontdoor/internal/gpusim"
	"frontdoor/internal/testenv"
	"frontdoor/router/reuse"
)

// failingStore fails its lookups while fail holds an error.
type failingStore struct {
	cache.Store
	fail atomic.Pointer[error]
}

func (s *failingStore) Get(ctx context.Context, key string) (*cache.Entry, error) {
	if err := s.fail.Load(); err != nil {
		return nil, *err
	}
	return s.Store.Get(ctx, key)
}

// TestCacheOutcomes makes every cache outcome happen through HTTP and
// checks that each reaches the X-Cache header, its own series of
// frontdoor_cache_requests_total (and no other), and the request's span.
func TestCacheOutcomes(t *testing.T) {
	recv := startOTLPReceiver(t)
	node := testenv.GPUSim(t, nil)
	// The coalesced request follows a leader whose stream this node starts
	// after 1 s and keeps going for 1 s more, so that the follower joins it
	// while it runs (once it has ended, its answer is an exact hit).
	slowNode := testenv.GPUSim(t, func(c *sim.Config) { c.TTFT, c.ITL = time.Second, 100*time.Millisecond })
	gatewayOn := func(node *sim.Server, mutate func(*Config), deps Deps) *testGateway {
		cfg := testConfig(node)
		cfg.Cache.Backend = "memory"
		cfg.Cache.Eligibility.MaxTemperature = 1
		tracingOn(t, &cfg, recv)
		if mutate != nil {
			mutate(&cfg)
		}
		if deps.Store == nil && cfg.Cache.Backend != "off" {
			deps.Store = cache.NewMemoryStore(64<<20, cfg.Cache.Embedder.Dims)
		}
		return startGatewayWith(t, cfg, deps)
	}
	gateway := func(mutate func(*Config), deps Deps) *testGateway { return gatewayOn(node, mutate, deps) }
	store := &failingStore{Store: cache.NewMemoryStore(64<<20, DefaultConfig().Cache.Embedder.Dims)}
	gw := gateway(nil, Deps{Store: store})
	off := gateway(func(c *Config) { c.Cache.Backend = "off" }, Deps{})
	forwarding := gateway(func(c *Config) { c.Responses.ForwardUnknownIDs = true }, Deps{}) // a conversation reaches a node
	disabled := gateway(func(c *Config) { c.Cache.Exact.Enabled, c.Cache.Semantic.Enabled = false, false }, Deps{})
	slow := gatewayOn(slowNode, nil, Deps{})

	const stored = "What is the capital of France?"
	askStored(t, gw, cbody(stored, ""))
	// An embeddings input stored, for the partial hit of a batch.
	entries, _ := store.Stats(context.Background())
	if xc, _ := embedVia(t, gw.URL, `{"model":"qwen3-8b","input":"An input embedded before"}`); xc != "miss" {
		t.Fatalf("embedding an input: X-Cache %q", xc)
	}
	waitEntries(t, gw, entries.Entries+1)
	// A response a node holds, for a follow-up's bypass.
	_, created := post(t, gw.URL+"/v1/responses", `{"model":"qwen3-8b","input":"a first turn"}`)
	var first struct{ ID string }
	if err := json.Unmarshal(created, &first); err != nil || first.ID == "" {
		t.Fatalf("no response id: %s", created)
	}
	failWith := func(err error) func() {
		return func() { store.fail.Store(&err) }
	}

	type scenario struct {
		gw     *testGateway
		path   string // default /v1/chat/completions
		body   string
		header []string
		before func() // after the metrics are read, before the request
		after  func()
	}
	scenarios := map[reuse.Outcome]scenario{
		{Result: reuse.ResultNone, Reason: reuse.ReasonNone}:          {gw: gw, body: `{"model":`},
		{Result: reuse.ResultHitExact, Reason: reuse.ReasonNone}:      {gw: gw, body: cbody(stored, "")},
		{Result: reuse.ResultHitSemantic, Reason: reuse.ReasonNone}:   {gw: gw, body: cbody("what is the capital of france", "")},
		{Result: reuse.ResultMiss, Reason: reuse.ReasonNone}:          {gw: gw, body: cbody("A question never asked before", "")},
		{Result: reuse.ResultPartial, Reason: reuse.ReasonNone}:       {gw: gw, path: "/v1/embeddings", body: `{"model":"qwen3-8b","input":["An input embedded before","An input never embedded"]}`},
		{Result: reuse.ResultMiss, Reason: reuse.ReasonNoCache}:       {gw: gw, body: cbody(stored, ""), header: []string{"Cache-Control", "no-cache"}},
		{Result: reuse.ResultMiss, Reason: reuse.ReasonLookupOnly}:    {gw: gw, body: cbody("Not in the cache", ""), header: []string{"X-Cache-Only", "1"}},
		{Result: reuse.ResultMiss, Reason: reuse.ReasonCoalesced}:     {gw: slow, body: cbody("Asked twice at once", `"stream":true`)}, // the follower; see below
		{Result: reuse.ResultBypass, Reason: reuse.ReasonOff}:         {gw: off, body: cbody(stored, "")},
		{Result: reuse.ResultBypass, Reason: reuse.ReasonNoStore}:     {gw: gw, body: cbody(stored, ""), header: []string{"Cache-Control", "no-store"}},
		{Result: reuse.ResultBypass, Reason: reuse.ReasonMultimodal}:  {gw: gw, body: `{"model":"qwen3-8b","messages":[{"role":"user","content":[{"type":"text","text":"what is this?"},{"type":"image_url","image_url":{"url":"data:image/png;base64,AAAA"}}]}]}`},
		{Result: reuse.ResultBypass, Reason: reuse.ReasonN}:           {gw: gw, body: cbody(stored, `"n":2`)},
		{Result: reuse.ResultBypass, Reason: reuse.ReasonTemperature}: {gw: gw, body: strings.Replace(cbody(stored, ""), `"temperature":0.7`, `"temperature":1.5`, 1)},
		{Result: reuse.ResultBypass, Reason: reuse.ReasonBatchPrompt}: {gw: gw, path: "/v1/completions", body: `{"model":"qwen3-8b","prompt":["one","two"],"max_tokens":4}`},
		{Result: reuse.ResultBypass, Reason: reuse.ReasonDisabled}:    {gw: disabled, body: cbody(stored, "")},
		{Result: reuse.ResultBypass, Reason: reuse.ReasonStoreError}:  {gw: gw, body: cbody(stored, ""), before: failWith(errors.New("lookup failed")), after: func() { store.fail.Store(nil) }},
		{Result: reuse.ResultBypass, Reason: reuse.ReasonStoreDown}:   {gw: gw, body: cbody(stored, ""), before: failWith(fmt.Errorf("down: %w", cache.ErrUnavailable)), after: func() { store.fail.Store(nil) }},
		{Result: reuse.ResultBypass, Reason: reuse.ReasonPrevResp}:    {gw: gw, path: "/v1/responses", body: `{"model":"qwen3-8b","input":"a second turn","previous_response_id":"` + first.ID + `"}`},
		{Result: reuse.ResultBypass, Reason: reuse.ReasonServerState}: {gw: forwarding, path: "/v1/responses", body: `{"model":"qwen3-8b","input":"go on","conversation":"conv_1"}`},
		{Result: reuse.ResultBypass, Reason: reuse.ReasonBackground}:  {gw: gw, path: "/v1/responses", body: `{"model":"qwen3-8b","input":"take your time","background":true}`},
		{Result: reuse.ResultBypass, Reason: reuse.ReasonTools}:       {gw: gw, path: "/v1/responses", body: `{"model":"qwen3-8b","input":"what time is it?","tools":[{"type":"function","name":"clock"}]}`},
	}
	if len(scenarios) != len(reuse.Outcomes) {
		t.Fatalf("%d scenarios for %d outcomes", len(scenarios), len(reuse.Outcomes))
	}
	seenResult, seenReason := map[reuse.Result]bool{}, map[reuse.Reason]bool{}
	for _, o := range reuse.Outcomes {
		seenResult[o.Result], seenReason[o.Reason] = true, true
	}
	for r := range reuse.NumResults {
		if !seenResult[r] {
			t.Errorf("result %q is in no outcome", r.Label())
		}
	}
	for r := range reuse.NumReasons {
		if !seenReason[r] {
			t.Errorf("reason %q is in no outcome", r.Label())
		}
	}

	for i, o := range reuse.Outcomes {
		name := o.Result.Label() + "/" + o.Reason.Label()
		sc, ok := scenarios[o]
		if !ok {
			t.Fatalf("no scenario for the outcome %s", name)
		}
		t.Run(name, func(t *testing.T) {
			before := metricsText(t, sc.gw)
			if sc.before != nil {
				sc.before()
			}
			id := fmt.Sprintf("outcome-%02d", i)
			headers := append([]string{"X-Request-Id", id}, sc.header...)
			url := sc.gw.URL + "/v1/chat/completions"
			if sc.path != "" {
				url = sc.gw.URL + sc.path
			}
			if o.Reason == reuse.ReasonCoalesced { // a leader in flight first
				led := make(chan string, 1)
				go func() {
					resp, _ := post(t, url, sc.body) // a stream: the node takes its TTFT
					led <- resp.Header.Get("X-Cache")
				}()
				testenv.Eventually(t, 5*time.Second, func() bool { return slowNode.Stats().Running > 0 }, "the leader never reached the node")
				defer func() {
					if xc := <-led; xc != "miss" {
						t.Errorf("the leader: X-Cache %q", xc)
					}
				}()
			}
			resp, b := post(t, url, sc.body, headers...)
			if sc.after != nil {
				sc.after()
			}
			if o.Result != reuse.ResultNone && resp.StatusCode/100 != 2 {
				t.Fatalf("status %d: %s", resp.StatusCode, b)
			}
			if got, ok := resp.Header[http.CanonicalHeaderKey("X-Cache")]; o.Result == reuse.ResultNone && ok || o.Result != reuse.ResultNone && strings.Join(got, ",") != o.Result.Header() {
				t.Errorf("X-Cache %q, want %q", got, o.Result.Header())
			}

			after := metricsText(t, sc.gw)
			if o.Reason == reuse.ReasonCoalesced {
				// The leader counts too: wait for its miss.
				testenv.Eventually(t, 5*time.Second, func() bool {
					after = metricsText(t, sc.gw)
					return seriesDelta(t, before, after, reuse.ResultMiss, reuse.ReasonNone) == 1
				}, "the leader's miss was not counted")
			}
			for r := reuse.ResultNone + 1; r < reuse.NumResults; r++ {
				for reason := range reuse.NumReasons {
					want := 0.0
					if (reuse.Outcome{Result: r, Reason: reason}) == o {
						want = 1
					}
					if o.Reason == reuse.ReasonCoalesced && r == reuse.ResultMiss && reason == reuse.ReasonNone {
						want = 1
					}
					if d := seriesDelta(t, before, after, r, reason); d != want {
						t.Errorf("frontdoor_cache_requests_total{result=%q,reason=%q} rose by %v, want %v", r.Label(), reason.Label(), d, want)
					}
				}
			}

			root, _ := recv.tree(t, id)
			if got := attr(root, "frontdoor.cache"); got != o.Result.Header() {
				t.Errorf("span attribute frontdoor.cache %q, want %q", got, o.Result.Header())
			}
			if got := attr(root, "frontdoor.cache.reason"); got != o.Reason.Label() {
				t.Errorf("span attribute frontdoor.cache.reason %q, want %q", got, o.Reason.Label())
			}
		})
	}
}

func seriesDelta(t *testing.T, before, after string, r reuse.Result, reason reuse.Reason) float64 {
	t.Helper()
	series := `frontdoor_cache_requests_total{result="` + r.Label() + `",reason="` + reason.Label() + `"}`
	return metricValue(t, after, series) - metricValue(t, before, series)
}

// TestCacheRequestSeriesCanHappen: /metrics has a
// frontdoor_cache_requests_total series for each outcome a request can
// have (reuse.Outcomes, each made to happen by TestCacheOutcomes) and for
// no other pair, such as hit_exact with reason temperature.
func TestCacheRequestSeriesCanHappen(t *testing.T) {
	cfg := testConfig(testenv.GPUSim(t, nil))
	cfg.Cache.Backend = "memory"
	gw := startGateway(t, cfg)
	want := map[string]bool{}
	for _, o := range reuse.Outcomes {
		if o.Result != reuse.ResultNone {
			want[`frontdoor_cache_requests_total{result="`+o.Result.Label()+`",reason="`+o.Reason.Label()+`"}`] = true
		}
	}
	got := map[string]bool{}
	for _, line := range strings.Split(metricsText(t, gw), "\n") {
		if series, _, ok := strings.Cut(line, " "); ok && strings.HasPrefix(series, "frontdoor_cache_requests_total{") {
			got[series] = true
			if !want[series] {
				t.Errorf("%s is exposed, but no request can have that outcome", series)
			}
		}
	}
	for series := range want {
		if !got[series] {
			t.Errorf("%s is not exposed", series)
		}
	}
	if len(want) != 20 {
		t.Errorf("%d possible outcomes; update this test and docs/observability.md when they change", len(want))
	}
}
