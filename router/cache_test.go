package router

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"frontdoor/cache"
	sim "frontdoor/internal/gpusim"
	"frontdoor/internal/testenv"
	"frontdoor/internal/units"
	"frontdoor/router/admin"
)

// cacheGateway starts a gpusim serving two models and a gateway with the
// cache on, on the given backend (see cacheBackends), and two tenants.
func cacheGateway(t *testing.T, backend string, mutate func(*Config)) (*testGateway, *sim.Server) {
	t.Helper()
	s := testenv.GPUSim(t, func(c *sim.Config) { c.Models = []string{"qwen3-8b", "qwen3-8b-v2"} })
	cfg := testConfig(s)
	cfg.Nodes[0].Models = []string{"qwen3-8b", "qwen3-8b-v2"}
	cfg.Cache.Backend = backend
	switch backend {
	case "redis":
		cfg.Redis.URL = testenv.StartRedis(t).URL()
		cfg.Cache.VectorSearch = "local"
	case "redisearch":
		cfg.Redis.URL = testenv.StartRediSearch(t).URL()
		cfg.Cache.Backend, cfg.Cache.VectorSearch = "redis", "redisearch"
	}
	cfg.Redis.KeyPrefix = "fdtest:"
	// A lookup slower than reads.timeout is a miss by design (100 ms by
	// default); under -race on a loaded machine an embedding and a search
	// can take that long, and a test of what a lookup finds would see a
	// miss instead. The read timeout has its own tests.
	cfg.Cache.Reads.Timeout = units.Duration(10 * time.Second)
	t.Setenv("TEST_ACME_KEYS", "sk-acme-1,sk-acme-2")
	t.Setenv("TEST_GLOBEX_KEYS", "sk-globex")
	cfg.Tenants = []Tenant{{Name: "acme", APIKeysEnv: "TEST_ACME_KEYS"}, {Name: "globex", APIKeysEnv: "TEST_GLOBEX_KEYS"}}
	if mutate != nil {
		mutate(&cfg)
	}
	return startGateway(t, cfg), s
}

// ask posts a chat request and returns its X-Cache value and body.
func ask(t *testing.T, gw *testGateway, body string, headers ...string) (string, *http.Response, []byte) {
	t.Helper()
	resp, b := post(t, gw.URL+"/v1/chat/completions", body, headers...)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
	return resp.Header.Get("X-Cache"), resp, b
}

func chatContent(t *testing.T, body []byte) string {
	t.Helper()
	var cc struct {
		Object  string `json:"object"`
		Choices []struct {
			Message struct{ Content string } `json:"message"`
		} `json:"choices"`
	}
	if err := json.Unmarshal(body, &cc); err != nil || cc.Object != "chat.completion" || len(cc.Choices) != 1 {
		t.Fatalf("not a chat.completion: %v %s", err, body)
	}
	return cc.Choices[0].Message.Content
}

// eventuallyHit repeats a request until it is answered from the cache: the
// write-back runs after the first answer has been sent.
func eventuallyHit(t *testing.T, gw *testGateway, body string, want string, headers ...string) (*http.Response, []byte) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Second)
	for {
		xc, resp, b := ask(t, gw, body, headers...)
		if xc == want {
			return resp, b
		}
		if time.Now().After(deadline) {
			t.Fatalf("X-Cache %q, want %q", xc, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// askStored sends a request that must miss, and waits until its answer is
// in the store (write-backs run after the answer was sent).
func askStored(t *testing.T, gw *testGateway, body string, headers ...string) {
	t.Helper()
	count := func() int64 {
		st, err := gw.cache.Store().Stats(context.Background())
		if err != nil {
			t.Fatalf("stats: %v", err)
		}
		return st.VectorEntries
	}
	// An earlier ask's write-back may still land: let the count settle
	// first, or its vector would pass for this one's.
	before := count()
	for still, deadline := 0, time.Now().Add(5*time.Second); still < 3 && time.Now().Before(deadline); {
		time.Sleep(50 * time.Millisecond)
		if n := count(); n == before && gw.cache.Status().WriteQueue == 0 {
			still++
		} else {
			still, before = 0, n
		}
	}
	if xc, _, _ := ask(t, gw, body, headers...); xc != "miss" {
		t.Fatalf("X-Cache %q, want miss", xc)
	}
	testenv.Eventually(t, 3*time.Second, func() bool { return count() > before }, "the answer was never stored")
}

// cacheBackends is the table of backends every cache behaviour runs on:
// memory, Redis with the in-process vector index, and Redis with RediSearch
// (skipped, with a message, where the module is absent).
var cacheBackends = []string{"memory", "redis", "redisearch"}

func forEachBackend(t *testing.T, f func(t *testing.T, backend string)) {
	for _, b := range cacheBackends {
		t.Run(b, func(t *testing.T) { f(t, b) })
	}
}

const sysPrompt = `{"role":"system","content":"You are a helpful assistant."}`

func cbody(user string, extra string) string {
	u, _ := json.Marshal(user)
	s := `{"model":"qwen3-8b","temperature":0.7,"max_tokens":16,"messages":[` + sysPrompt + `,{"role":"user","content":` + string(u) + `}]`
	if extra != "" {
		s += "," + extra
	}
	return s + "}"
}

func TestCacheExactHit(t *testing.T) {
	forEachBackend(t, func(t *testing.T, backend string) {
		gw, s := cacheGateway(t, backend, nil)
		body := cbody("What is the capital of France?", "")
		xc, resp, first := ask(t, gw, body)
		if xc != "miss" || resp.Header.Get("X-Cache-Entry") == "" {
			t.Fatalf("first request: X-Cache %q entry %q", xc, resp.Header.Get("X-Cache-Entry"))
		}
		resp, second := eventuallyHit(t, gw, body, "hit-exact")
		received := s.Stats().Received
		if chatContent(t, first) != chatContent(t, second) {
			t.Fatal("a hit must return the stored content")
		}
		if resp.Header.Get("X-Cache-Age") == "" || resp.Header.Get("X-Cache-Entry") == "" {
			t.Fatalf("hit headers: %v", resp.Header)
		}
		// Same request in another form: key order, whitespace, 0.70.
		reordered := `{ "messages": [ {"content":"You are a helpful assistant.","role":"system"}, {"role":"user","content":"What is the capital of France?"} ],
			"max_tokens": 16, "temperature": 0.70, "model": "qwen3-8b" }`
		if xc, _, _ := ask(t, gw, reordered); xc != "hit-exact" {
			t.Fatalf("reordered request: X-Cache %q", xc)
		}
		if got := s.Stats().Received; got != received {
			t.Fatalf("hits reached the node: %d requests, want %d", got, received)
		}
		var first1, second1 struct{ ID string }
		_ = json.Unmarshal(first, &first1)
		_ = json.Unmarshal(second, &second1)
		if first1.ID == second1.ID {
			t.Fatal("a replayed answer needs a fresh id")
		}
	})
}

func TestCacheMissesWhenAnythingChanges(t *testing.T) {
	forEachBackend(t, func(t *testing.T, backend string) {
		gw, _ := cacheGateway(t, backend, nil)
		base := cbody("Name three rivers", "")
		ask(t, gw, base, "Authorization", "Bearer sk-acme-1")
		eventuallyHit(t, gw, base, "hit-exact", "Authorization", "Bearer sk-acme-2") // same tenant, other key
		variants := map[string]string{
			"system prompt": strings.Replace(base, "helpful assistant", "pirate", 1),
			"temperature":   strings.Replace(base, `"temperature":0.7`, `"temperature":0.9`, 1),
			"max_tokens":    strings.Replace(base, `"max_tokens":16`, `"max_tokens":17`, 1),
			"tools":         cbody("Name three rivers", `"tools":[{"type":"function","function":{"name":"search"}}]`),
			"model":         strings.Replace(base, `"model":"qwen3-8b"`, `"model":"qwen3-8b-v2"`, 1),
		}
		for name, b := range variants {
			if xc, _, _ := ask(t, gw, b, "Authorization", "Bearer sk-acme-1"); xc != "miss" {
				t.Fatalf("%s changed: X-Cache %q, want miss", name, xc)
			}
		}
		if xc, _, _ := ask(t, gw, base, "Authorization", "Bearer sk-globex"); xc != "miss" {
			t.Fatalf("another tenant: X-Cache %q, want miss", xc)
		}
		if xc, _, _ := ask(t, gw, base); xc != "miss" {
			t.Fatalf("the default tenant: X-Cache %q, want miss", xc)
		}
	})
}

func TestCacheSemanticHitAndGuards(t *testing.T) {
	forEachBackend(t, func(t *testing.T, backend string) {
		// A low threshold, so that the guards, not the threshold, decide.
		gw, _ := cacheGateway(t, backend, func(c *Config) { c.Cache.Semantic.Threshold = 0.5 })
		askStored(t, gw, cbody("What is the capital of France?", ""))
		resp, b := eventuallyHit(t, gw, cbody("what is the capital of france", ""), "hit-semantic")
		if sim := resp.Header.Get("X-Cache-Similarity"); sim == "" || sim < "0.99" {
			t.Fatalf("similarity header %q", sim)
		}
		if chatContent(t, b) != sim.ExpectedText("You are a helpful assistant.\nWhat is the capital of France?", 16) {
			t.Fatal("a semantic hit must return the stored answer")
		}
		// Numbers guard: a different number is never a hit, however similar.
		askStored(t, gw, cbody("What is 12*7?", ""))
		if xc, _, _ := ask(t, gw, cbody("What is 12*8?", "")); xc != "miss" {
			t.Fatalf("numbers guard: X-Cache %q", xc)
		}
		// Negation guard.
		askStored(t, gw, cbody("Is Paris in France?", ""))
		if xc, _, _ := ask(t, gw, cbody("Is Paris not in France?", "")); xc != "miss" {
			t.Fatalf("negation guard: X-Cache %q", xc)
		}
		// A different system prompt is another scope: never a semantic hit.
		other := strings.Replace(cbody("what is the capital of france", ""), "helpful assistant", "pirate", 1)
		if xc, _, _ := ask(t, gw, other); xc != "miss" {
			t.Fatalf("other system prompt: X-Cache %q", xc)
		}
		mresp, err := httpClient.Get(gw.URL + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		mb, _ := io.ReadAll(mresp.Body)
		mresp.Body.Close()
		for _, series := range []string{`frontdoor_cache_guard_rejections_total{guard="numbers"}`, `frontdoor_cache_guard_rejections_total{guard="negation"}`,
			`frontdoor_cache_requests_total{result="hit_semantic",reason=""}`, `frontdoor_cache_similarity_count`} {
			if metricValue(t, string(mb), series) < 1 {
				t.Fatalf("metric %s never counted", series)
			}
		}
	})
}

// metricValue returns the value of one series in a Prometheus exposition.
func metricValue(t *testing.T, exposition, series string) float64 {
	t.Helper()
	for _, line := range strings.Split(exposition, "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil {
				t.Fatalf("bad sample %q", line)
			}
			return f
		}
	}
	return 0
}

func TestCacheStreamWrittenBackAndReplayed(t *testing.T) {
	forEachBackend(t, func(t *testing.T, backend string) {
		gw, s := cacheGateway(t, backend, nil)
		prompt := "Tell me about lighthouses"
		stream := cbody(prompt, `"stream":true`)
		resp, b := post(t, gw.URL+"/v1/chat/completions", stream)
		text, _, done := streamText(t, strings.NewReader(string(b)))
		want := sim.ExpectedText("You are a helpful assistant.\n"+prompt, 16)
		if resp.Header.Get("X-Cache") != "miss" || text != want || !done {
			t.Fatalf("streamed miss: %q %q done=%v", resp.Header.Get("X-Cache"), text, done)
		}
		if strings.Contains(string(b), `"usage"`) {
			t.Fatal("the usage chunk the gateway asked for must be stripped for this client")
		}
		// Replayed as SSE, with usage when asked for.
		resp, b = eventuallyHit(t, gw, cbody(prompt, `"stream":true,"stream_options":{"include_usage":true}`), "hit-exact")
		text, events, done := streamText(t, strings.NewReader(string(b)))
		if text != want || !done || events < 4 || !strings.Contains(string(b), `"completion_tokens":16`) {
			t.Fatalf("SSE replay: %q (%d events, done=%v): %s", text, events, done, b)
		}
		if !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
			t.Fatalf("replay content type %q", resp.Header.Get("Content-Type"))
		}
		// And as JSON.
		xc, _, jb := ask(t, gw, cbody(prompt, ""))
		if xc != "hit-exact" || chatContent(t, jb) != want {
			t.Fatalf("JSON replay: %q %s", xc, jb)
		}
		if s.Stats().Received != 1 {
			t.Fatalf("node saw %d requests, want 1", s.Stats().Received)
		}
	})
}

func TestCacheControlAndEligibility(t *testing.T) {
	forEachBackend(t, func(t *testing.T, backend string) {
		gw, s := cacheGateway(t, backend, nil)
		body := cbody("Cache control please", "")
		if xc, _, _ := ask(t, gw, body, "Cache-Control", "no-store"); xc != "bypass" {
			t.Fatalf("no-store: %q", xc)
		}
		time.Sleep(100 * time.Millisecond)
		if xc, _, _ := ask(t, gw, body); xc != "miss" {
			t.Fatalf("no-store must not store: next request %q", xc)
		}
		eventuallyHit(t, gw, body, "hit-exact")
		before := s.Stats().Received
		if xc, _, _ := ask(t, gw, body, "Cache-Control", "no-cache"); xc != "miss" {
			t.Fatalf("no-cache must skip the lookup: %q", xc)
		}
		if s.Stats().Received != before+1 {
			t.Fatal("no-cache must go upstream")
		}
		mm := `{"model":"qwen3-8b","messages":[{"role":"user","content":[{"type":"text","text":"what is this?"},{"type":"image_url","image_url":{"url":"data:image/png;base64,AAAA"}}]}]}`
		for i := 0; i < 2; i++ {
			if xc, _, _ := ask(t, gw, mm); xc != "bypass" {
				t.Fatalf("multimodal: %q", xc)
			}
		}
		hot := strings.Replace(cbody("hot", ""), `"temperature":0.7`, `"temperature":2`, 1)
		if xc, _, _ := ask(t, gw, hot, "X-Cache-TTL", "5"); xc != "miss" {
			t.Fatalf("temperature 2 is within max_temperature 2: %q", xc)
		}
		if xc, _, _ := ask(t, gw, cbody("many", `"n":2`)); xc != "bypass" {
			t.Fatalf("n=2: %q", xc)
		}
	})
}

// 50 identical concurrent streaming requests make one upstream call, and
// every client gets the whole answer.
func TestCacheCoalescesIdenticalMisses(t *testing.T) {
	s := testenv.GPUSim(t, func(c *sim.Config) { c.ITL, c.OutputTokens = 20*time.Millisecond, 30 })
	cfg := testConfig(s)
	cfg.Cache.Backend = "memory"
	gw := startGateway(t, cfg)
	body := chatBody("coalesce me", `"stream":true`)
	want := sim.ExpectedText("coalesce me", 30)
	var wg sync.WaitGroup
	results := make([]string, 50)
	for i := range results {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			resp, b := post(t, gw.URL+"/v1/chat/completions", body)
			text, _, done := streamText(t, strings.NewReader(string(b)))
			results[i] = fmt.Sprintf("%d|%s|%v", resp.StatusCode, text, done)
		}(i)
	}
	wg.Wait()
	for i, r := range results {
		if r != "200|"+want+"|true" {
			t.Fatalf("client %d got %q", i, r)
		}
	}
	if got := s.Stats().Received; got != 1 {
		t.Fatalf("node received %d requests, want exactly 1", got)
	}
}

// Property: across random traffic of two tenants, every hit a tenant gets
// is an entry that tenant's own misses created.
func TestCacheNeverCrossesTenants(t *testing.T) {
	gw, _ := cacheGateway(t, "memory", nil)
	tenants := map[string]string{"acme": "Bearer sk-acme-1", "globex": "Bearer sk-globex"}
	owner := map[string]string{}
	prompts := []string{"What is the capital of France?", "what is the capital of france", "Capital of France?", "Name a river", "name a river!"}
	rnd := uint64(42)
	next := func(n int) int { rnd = rnd*6364136223846793005 + 1442695040888963407; return int(rnd>>33) % n }
	hits := 0
	for i := 0; i < 300; i++ {
		tn := []string{"acme", "globex"}[next(2)]
		xc, resp, _ := ask(t, gw, cbody(prompts[next(len(prompts))], ""), "Authorization", tenants[tn])
		id := resp.Header.Get("X-Cache-Entry")
		switch xc {
		case "miss":
			owner[id] = tn
		case "hit-exact", "hit-semantic":
			hits++
			if o, ok := owner[id]; ok && o != tn {
				t.Fatalf("tenant %s was answered from %s's entry %s", tn, o, id)
			} else if !ok {
				t.Fatalf("hit on unknown entry %s", id)
			}
		}
	}
	if hits < 100 {
		t.Fatalf("only %d hits: the property was barely exercised", hits)
	}
}

func TestCacheAdmin(t *testing.T) {
	forEachBackend(t, func(t *testing.T, backend string) {
		t.Setenv("TEST_ADMIN_TOKEN", "a8f8e432998d9af0701319da19bf179f744814bc9d3436fa0ac818363e7bdaa4")
		gw, _ := cacheGateway(t, backend, func(c *Config) {
			c.Admin.TokenEnv = "TEST_ADMIN_TOKEN"
			c.Admin.AllowCIDRs = nil // only the token opens admin endpoints
		})
		admin := func(method, path, token string) (int, string) {
			req, _ := http.NewRequest(method, gw.URL+path, nil)
			if token != "" {
				req.Header.Set("Authorization", "Bearer "+token)
			}
			resp, err := httpClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			return resp.StatusCode, string(b)
		}
		if code, _ := admin("GET", "/admin/cache/stats", ""); code != 403 {
			t.Fatalf("admin without token: %d", code)
		}
		if code, _ := admin("GET", "/admin/cache/stats", "wrong"); code != 403 {
			t.Fatalf("admin with a wrong token: %d", code)
		}
		body := cbody("Delete me later", "")
		askStored(t, gw, body)
		_, resp, _ := ask(t, gw, body)
		id := resp.Header.Get("X-Cache-Entry")
		if resp.Header.Get("X-Cache") != "hit-exact" || id == "" {
			t.Fatalf("expected a hit with an entry id, got %v", resp.Header)
		}
		code, stats := admin("GET", "/admin/cache/stats", "a8f8e432998d9af0701319da19bf179f744814bc9d3436fa0ac818363e7bdaa4")
		if code != 200 || !strings.Contains(stats, `"hit_exact":1`) || !strings.Contains(stats, `"entries":1`) {
			t.Fatalf("stats %d: %s", code, stats)
		}
		if code, b := admin("DELETE", "/admin/cache/entries/"+id, "a8f8e432998d9af0701319da19bf179f744814bc9d3436fa0ac818363e7bdaa4"); code != 200 {
			t.Fatalf("delete: %d %s", code, b)
		}
		if xc, _, _ := ask(t, gw, body); xc != "miss" {
			t.Fatalf("after delete: X-Cache %q", xc)
		}
		if code, _ := admin("DELETE", "/admin/cache/entries/"+id, "a8f8e432998d9af0701319da19bf179f744814bc9d3436fa0ac818363e7bdaa4"); code != 404 {
			t.Fatalf("second delete: %d", code)
		}
		askStored(t, gw, cbody("acme's question", ""), "Authorization", "Bearer sk-acme-1")
		if code, b := admin("DELETE", "/admin/cache?namespace=acme", "a8f8e432998d9af0701319da19bf179f744814bc9d3436fa0ac818363e7bdaa4"); code != 200 || !strings.Contains(b, `"deleted":1`) {
			t.Fatalf("purge: %d %s", code, b)
		}
		if xc, _, _ := ask(t, gw, cbody("acme's question", ""), "Authorization", "Bearer sk-acme-1"); xc != "miss" {
			t.Fatalf("after purge: %q", xc)
		}
		if code, _ := admin("DELETE", "/admin/cache", "a8f8e432998d9af0701319da19bf179f744814bc9d3436fa0ac818363e7bdaa4"); code != 400 {
			t.Fatalf("purge without namespace: %d", code)
		}
	})
}

// gatedStore holds its first Put after storing the entry, until release is
// closed: a write-back that has landed but not yet returned.
type gatedStore struct {
	cache.Store
	once    sync.Once
	stored  chan struct{}
	release chan struct{}
}

func (s *gatedStore) Put(ctx context.Context, e *cache.Entry, vec []float32, ttl time.Duration) error {
	err := s.Store.Put(ctx, e, vec, ttl)
	first := false
	s.once.Do(func() { first = true; close(s.stored) })
	if first {
		<-s.release
	}
	return err
}

// TestCachePurgeBeatsFlights: after an admin purge, no request is answered
// with an answer produced before it, neither one whose write-back has not
// returned yet (until then, a finished flight answers identical requests)
// nor one that was still upstream when the purge came (it is not stored).
func TestCachePurgeBeatsFlights(t *testing.T) {
	s := testenv.GPUSim(t, func(c *sim.Config) { c.TTFT = 300 * time.Millisecond })
	cfg := testConfig(s)
	cfg.Cache.Backend = "memory"
	t.Setenv("TEST_ADMIN_TOKEN", "a8f8e432998d9af0701319da19bf179f744814bc9d3436fa0ac818363e7bdaa4")
	cfg.Admin.TokenEnv, cfg.Admin.AllowCIDRs = "TEST_ADMIN_TOKEN", nil
	store := &gatedStore{Store: cache.NewMemoryStore(64<<20, cfg.Cache.Embedder.Dims), stored: make(chan struct{}), release: make(chan struct{})}
	gw := startGatewayWith(t, cfg, Deps{Store: store})
	t.Cleanup(func() { close(store.release) }) // before the gateway's shutdown
	purge := func() {
		t.Helper()
		if code, b := adminDo(t, http.MethodDelete, gw.URL+"/admin/cache?namespace=default", "", "Authorization", "Bearer a8f8e432998d9af0701319da19bf179f744814bc9d3436fa0ac818363e7bdaa4"); code != 200 {
			t.Fatalf("purge: %d %s", code, b)
		}
	}

	landed := cbody("Stored, but its write-back has not returned", "")
	if xc, _, _ := ask(t, gw, landed); xc != "miss" {
		t.Fatalf("first ask: %q", xc)
	}
	select {
	case <-store.stored:
	case <-time.After(10 * time.Second):
		t.Fatal("the answer was never written back")
	}
	if xc, _, _ := ask(t, gw, landed); xc != "hit-exact" {
		t.Fatalf("before the purge: %q", xc)
	}
	purge()
	if xc, _, _ := ask(t, gw, landed); xc != "miss" {
		t.Fatalf("after the purge, with the write-back still under way: %q", xc)
	}

	upstream := cbody("Still upstream when the purge came", "")
	got := make(chan string, 1)
	go func() {
		resp, err := httpClient.Post(gw.URL+"/v1/chat/completions", "application/json", strings.NewReader(upstream))
		if err != nil {
			got <- err.Error()
			return
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		got <- fmt.Sprint(resp.StatusCode, " ", resp.Header.Get("X-Cache"), " ", len(b) > 0)
	}()
	testenv.Eventually(t, 5*time.Second, func() bool { return s.Stats().Running > 0 }, "the request never reached the node")
	purge()
	if r := <-got; r != "200 miss true" {
		t.Fatalf("the request across the purge: %s", r)
	}
	if xc, _, _ := ask(t, gw, upstream); xc != "miss" {
		t.Fatalf("an answer produced across the purge was cached: %q", xc)
	}
}

// A dead Redis never fails a request: the cache is bypassed, errors are
// counted, and hits resume once Redis is back.
// TestCacheSurvivesRedisOutage kills Redis under a gateway and starts it
// again, empty: no request fails, /status shows the backend down while it
// is down, and hits resume within 5 s of its return.
func TestCacheSurvivesRedisOutage(t *testing.T) {
	forEachRedisBackend(t, func(t *testing.T, backend string) {
		cfg, r := redisGatewayConfig(t, backend, testenv.GPUSim(t, nil))
		gw := startGateway(t, cfg)
		askStored(t, gw, cbody("before the outage", ""))
		if xc, _, _ := ask(t, gw, cbody("before the outage", "")); xc != "hit-exact" {
			t.Fatalf("before the outage: %q", xc)
		}
		if st := gatewayStatus(t, gw); st.Cache == nil || st.Cache.State != cache.StateOK || !st.Cache.Up {
			t.Fatalf("before the outage: /status cache %+v", st.Cache)
		}
		r.Kill()
		for i := 0; i < 40; i++ {
			start := time.Now()
			resp, b := post(t, gw.URL+"/v1/chat/completions", cbody(fmt.Sprintf("during the outage %d", i%5), ""))
			if resp.StatusCode != 200 || resp.Header.Get("X-Cache") != "bypass" {
				t.Fatalf("request %d during the outage: %d %q %s", i, resp.StatusCode, resp.Header.Get("X-Cache"), b)
			}
			if d := time.Since(start); d > time.Second {
				t.Fatalf("request %d took %v: a dead Redis must not slow requests down", i, d)
			}
		}
		st := gatewayStatus(t, gw)
		if st.Cache.State != cache.StateBypassed || st.Cache.Up || st.Cache.ReadBreaker != "open" {
			t.Fatalf("during the outage: /status cache %+v, want bypassed and down", st.Cache)
		}
		mb := metricsText(t, gw)
		if metricValue(t, mb, `frontdoor_cache_errors_total{op="get"}`) < 1 ||
			metricValue(t, mb, `frontdoor_cache_requests_total{result="bypass",reason="store_error"}`)+
				metricValue(t, mb, `frontdoor_cache_requests_total{result="bypass",reason="store_down"}`) < 40 ||
			metricValue(t, mb, `frontdoor_cache_breaker_transitions_total{path="read",to="open"}`) < 1 ||
			metricValue(t, mb, `frontdoor_cache_backend_up`) != 0 {
			t.Fatalf("the outage is not in the metrics:\n%s", mb)
		}
		if !strings.Contains(gw.Logs.String(), `"level":"WARN","msg":"cache: read breaker open; lookups bypass the store","from":"closed","last_error":"cache: redis get: `) {
			t.Fatalf("no WARN line with the error for the open breaker:\n%s", gw.Logs.String())
		}
		local := backend == "redis" // the in-process index, synced through Redis
		if local {
			testenv.Eventually(t, 5*time.Second, func() bool {
				h := gatewayStatus(t, gw).Cache.IndexSync
				return h != nil && h.State == "failing" && h.LastError != ""
			}, "/status never showed the index sync failing")
			if metricValue(t, metricsText(t, gw), `frontdoor_cache_index_sync_errors_total`) < 1 ||
				!strings.Contains(gw.Logs.String(), `"level":"WARN","msg":"cache: the in-process index's sync with Redis failed`) {
				t.Fatalf("the index sync's failure is not in the metrics or the log:\n%s", gw.Logs.String())
			}
		} else if h := gatewayStatus(t, gw).Cache.IndexSync; h != nil {
			t.Fatalf("index_sync with RediSearch: %+v, want none", h)
		}
		r.Start()
		back := time.Now()
		for {
			xc, resp, _ := ask(t, gw, cbody("after the outage", ""))
			if resp.StatusCode != 200 {
				t.Fatalf("status %d after the restart", resp.StatusCode)
			}
			if xc == "hit-exact" {
				break
			}
			if time.Since(back) > 5*time.Second {
				t.Fatalf("hits did not resume within 5s of Redis coming back (last X-Cache %q)", xc)
			}
			time.Sleep(50 * time.Millisecond)
		}
		t.Logf("hits resumed %v after Redis came back", time.Since(back))
		if backend == "redisearch" { // the restart lost the index: it is made again
			askStored(t, gw, cbody("What is the tallest mountain on Earth?", ""))
			eventuallyHit(t, gw, cbody("what is the tallest mountain on earth", ""), "hit-semantic")
		}
		testenv.Eventually(t, 3*time.Second, func() bool { return gatewayStatus(t, gw).Cache.Up }, "/status never showed the backend up again")
		if local {
			testenv.Eventually(t, 5*time.Second, func() bool {
				h := gatewayStatus(t, gw).Cache.IndexSync
				return h.State == "ok" && h.Resyncs > 0
			}, "/status never showed the index sync recovered")
		}
		if !strings.Contains(gw.Logs.String(), `"level":"WARN","msg":"cache: read breaker closed; lookups reach the store again"`) {
			t.Fatalf("no WARN line for the closed breaker:\n%s", gw.Logs.String())
		}
	})
}

func gatewayStatus(t *testing.T, gw *testGateway) admin.Status {
	t.Helper()
	resp, err := httpClient.Get(gw.URL + "/status")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var st admin.Status
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		t.Fatal(err)
	}
	return st
}

func metricsText(t *testing.T, gw *testGateway) string {
	t.Helper()
	resp, err := httpClient.Get(gw.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// Two gateways sharing one plain Redis: an answer cached through one is an
// exact and a semantic hit on the other.
func TestCacheSharedAcrossGateways(t *testing.T) {
	forEachRedisBackend(t, func(t *testing.T, backend string) {
		s := testenv.GPUSim(t, nil)
		cfg, _ := redisGatewayConfig(t, backend, s)
		a, b := startGateway(t, cfg), startGateway(t, cfg)
		askStored(t, a, cbody("Which ocean is the largest?", ""))
		if xc, _, _ := ask(t, b, cbody("Which ocean is the largest?", "")); xc != "hit-exact" {
			t.Fatalf("exact on the other gateway: %q", xc)
		}
		testenv.Eventually(t, 3*time.Second, func() bool {
			st, err := b.cache.Store().Stats(context.Background())
			return err == nil && st.VectorEntries == 1
		}, "the vector never reached the other gateway's index")
		before := s.Stats().Received
		if xc, _, _ := ask(t, b, cbody("which ocean is the largest", "")); xc != "hit-semantic" {
			t.Fatalf("semantic on the other gateway: %q", xc)
		}
		if s.Stats().Received != before {
			t.Fatal("the semantic hit reached the node")
		}
	})
}

// A gateway whose Redis is down at start serves uncached and picks the
// cache up when Redis arrives.
func TestCacheRedisDownAtStart(t *testing.T) {
	forEachRedisBackend(t, func(t *testing.T, backend string) {
		cfg, r := redisGatewayConfig(t, backend, testenv.GPUSim(t, nil))
		r.Kill()
		gw := startGateway(t, cfg)
		if xc, resp, _ := ask(t, gw, cbody("early", "")); xc != "bypass" || resp.StatusCode != 200 {
			t.Fatalf("with Redis down: %q", xc)
		}
		if st := gatewayStatus(t, gw); st.Cache.Up || st.Cache.Why != "store not connected" {
			t.Fatalf("with Redis down: /status cache %+v", st.Cache)
		}
		r.Start()
		deadline := time.Now().Add(8 * time.Second)
		for {
			if xc, _, _ := ask(t, gw, cbody("early", "")); xc == "hit-exact" {
				return
			}
			if time.Now().After(deadline) {
				t.Fatal("the cache never came up after Redis started")
			}
			time.Sleep(100 * time.Millisecond)
		}
	})
}

// A Redis that stalls (here CLIENT PAUSE, as a failover or a long command
// would) costs a request reads.timeout (100 ms by default), not the stall:
// the lookup is a miss, the request is answered by a node, and hits come
// back when Redis does.
func TestCacheStalledRedisCostsTheReadTimeout(t *testing.T) {
	cfg, r := redisGatewayConfig(t, "redis", testenv.GPUSim(t, nil))
	gw := startGateway(t, cfg)
	askStored(t, gw, cbody("stored before the stall", ""))
	testenv.Eventually(t, 5*time.Second, func() bool {
		xc, _, _ := ask(t, gw, cbody("stored before the stall", ""))
		return xc == "hit-exact"
	}, "no exact hit before the stall")
	rc := redis.NewClient(&redis.Options{Addr: r.Addr()})
	defer rc.Close()
	if err := rc.Do(context.Background(), "CLIENT", "PAUSE", "3000", "ALL").Err(); err != nil {
		t.Fatalf("CLIENT PAUSE: %v", err)
	}
	start := time.Now()
	xc, _, _ := ask(t, gw, cbody("stored before the stall", ""))
	if took := time.Since(start); xc == "hit-exact" || took > 2*time.Second {
		t.Fatalf("during a 3 s stall: X-Cache %q after %v; want a miss (or bypass) after about reads.timeout", xc, took)
	}
	testenv.Eventually(t, 10*time.Second, func() bool {
		xc, _, _ := ask(t, gw, cbody("stored before the stall", ""))
		return xc == "hit-exact"
	}, "hits never came back after the stall")
}

// redisGatewayConfig is a config for one sim with the cache on a fresh
// Redis: plain ("redis", the in-process index) or with RediSearch.
func redisGatewayConfig(t *testing.T, backend string, s *sim.Server) (Config, *testenv.Redis) {
	t.Helper()
	cfg := testConfig(s)
	cfg.Cache.Backend, cfg.Cache.VectorSearch = "redis", "local"
	var r *testenv.Redis
	if backend == "redisearch" {
		r = testenv.StartRediSearch(t)
		cfg.Cache.VectorSearch = "redisearch"
	} else {
		r = testenv.StartRedis(t)
	}
	cfg.Redis.URL = r.URL()
	return cfg, r
}

func forEachRedisBackend(t *testing.T, f func(t *testing.T, backend string)) {
	for _, b := range []string{"redis", "redisearch"} {
		t.Run(b, func(t *testing.T) { f(t, b) })
	}
}

func TestCacheWarmFromFile(t *testing.T) {
	dir := t.TempDir()
	file := dir + "/hot.jsonl"
	lines := "# hot prompts\n" + cbody("Warm question one", "") + "\n\n" +
		`{"tenant":"acme","request":` + cbody("Warm question two", "") + "}\n"
	if err := os.WriteFile(file, []byte(lines), 0o600); err != nil {
		t.Fatal(err)
	}
	gw, s := cacheGateway(t, "memory", func(c *Config) { c.Warm.Files = []string{file} })
	res, err := gw.Warm(context.Background(), strings.TrimPrefix(gw.URL, "http://"))
	if err != nil || res.Done != 2 || res.Warmed != 2 || res.Failed != 0 {
		t.Fatalf("warm: %+v %v", res, err)
	}
	received := s.Stats().Received
	eventuallyHit(t, gw, cbody("Warm question one", ""), "hit-exact")
	eventuallyHit(t, gw, cbody("Warm question two", ""), "hit-exact", "Authorization", "Bearer sk-acme-1")
	if s.Stats().Received != received {
		t.Fatal("warmed prompts reached the node again")
	}
	// A client can't use the warm headers to pick a tenant.
	if xc, _, _ := ask(t, gw, cbody("Warm question two", ""), "X-Frontdoor-Warm", "guess", "X-Frontdoor-Tenant", "acme"); xc != "miss" {
		t.Fatalf("a forged warm header reached acme's namespace: %q", xc)
	}
}

// TestCacheAutoFallbackIsLogged: on a Redis whose search module cannot do
// vectors (Debian's RediSearch 1.2), vector_search auto serves from the
// in-process index and says why, once, at WARN.
func TestCacheAutoFallbackIsLogged(t *testing.T) {
	s := testenv.GPUSim(t, nil)
	r := testenv.StartRedis(t, "--loadmodule", testenv.DebianRediSearch(t))
	cfg := testConfig(s)
	cfg.Cache.Backend, cfg.Cache.VectorSearch, cfg.Redis.URL = "redis", "auto", r.URL()
	gw := startGateway(t, cfg)
	askStored(t, gw, cbody("How many moons does Mars have?", ""))
	eventuallyHit(t, gw, cbody("how many moons does mars have", ""), "hit-semantic")
	logs := gw.Logs.String()
	if !strings.Contains(logs, `"level":"WARN","msg":"cache: vector_search auto chose the in-process index","why":"server has no RediSearch with vector support`) {
		t.Fatalf("no WARN line for the fallback:\n%s", logs)
	}
	if st, err := gw.cache.Store().Stats(context.Background()); err != nil || st.VectorSearchBy != "local" {
		t.Fatalf("Stats = %+v, %v", st, err)
	}
}

// TestSimilarityHistogramSeesNearMisses: a lookup whose best candidate is
// just under the threshold is a miss, and frontdoor_cache_similarity still
// observes it (the threshold search looks similarityWindow lower), while an
// unrelated question's candidates are not observed.
func TestSimilarityHistogramSeesNearMisses(t *testing.T) {
	// The local embedder puts the two questions at 0.82: under 0.9, within
	// 0.1 of it.
	gw, _ := cacheGateway(t, "memory", func(c *Config) { c.Cache.Semantic.Threshold = 0.9 })
	askStored(t, gw, cbody("What is the capital of France?", ""))
	count := func() float64 { return metricValue(t, metricsText(t, gw), `frontdoor_cache_similarity_count`) }
	before := count()
	if xc, _, _ := ask(t, gw, cbody("tell me, what is the capital city of france", "")); xc != "miss" {
		t.Fatalf("a near miss under a 0.9 threshold: X-Cache %q", xc)
	}
	if got := count(); got != before+1 {
		t.Fatalf("frontdoor_cache_similarity_count %v after a near miss, want %v", got, before+1)
	}
	if xc, _, _ := ask(t, gw, cbody("Describe the life cycle of a monarch butterfly", "")); xc != "miss" {
		t.Fatalf("an unrelated question: X-Cache %q", xc)
	}
	if got := count(); got != before+1 {
		t.Fatalf("frontdoor_cache_similarity_count %v after an unrelated question, want %v (nothing within the window)", got, before+1)
	}
}
