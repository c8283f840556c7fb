package router

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"frontdoor/balancer"
	"frontdoor/cache"
	sim "frontdoor/internal/gpusim"
	"frontdoor/internal/testenv"
)

// byID sends method to url with the tenant's key and decodes the
// answer.
func byID(t *testing.T, method, url, key string) (*http.Response, map[string]any) {
	t.Helper()
	req, _ := http.NewRequest(method, url, nil)
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	var m map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&m); err != nil {
		t.Fatalf("%s %s: status %d, not JSON: %v", method, url, resp.StatusCode, err)
	}
	return resp, m
}

// TestResponsesByID: GET and DELETE /v1/responses/{id} and a follow-up's
// previous_response_id go to the node that created the response; ids of
// another tenant, of responses not stored, or unknown, are a clean 404;
// a response the cache served is rendered again from its entry.
func TestResponsesByID(t *testing.T) {
	a, b := testenv.GPUSim(t, nil), testenv.GPUSim(t, nil)
	cfg := testConfig(a, b)
	cfg.Cache.Backend = "memory"
	cfg.Balancer.Policy = "round_robin" // each node creates some; a follow-up not pinned would reach the other one half the time
	t.Setenv("TEST_ACME_KEYS", "sk-acme-1")
	t.Setenv("TEST_GLOBEX_KEYS", "sk-globex")
	cfg.Tenants = []Tenant{{Name: "acme", APIKeysEnv: "TEST_ACME_KEYS"}, {Name: "globex", APIKeysEnv: "TEST_GLOBEX_KEYS"}}
	gw := startGateway(t, cfg)
	nodeURL := map[string]string{"gpu-a": a.URL(), "gpu-b": b.URL()}
	acme := []string{"Authorization", "Bearer sk-acme-1"}

	created := map[string]string{} // id -> node
	for i := range 8 {
		extra := `"max_output_tokens":8` // no-store: each goes to a node
		if i%2 == 1 {
			extra += `,"stream":true`
		}
		resp, raw := post(t, gw.URL+"/v1/responses", respBody("question number "+strings.Repeat("x", i), extra), append(acme, "Cache-Control", "no-store")...)
		if resp.StatusCode != 200 {
			t.Fatalf("create: %d %s", resp.StatusCode, raw)
		}
		id := ""
		if i%2 == 1 {
			_, after, _ := strings.Cut(string(raw), `"response":{"id":"`)
			id, _, _ = strings.Cut(after, `"`)
		} else {
			var m struct{ ID string }
			_ = json.Unmarshal(raw, &m)
			id = m.ID
		}
		if id == "" {
			t.Fatalf("no id in %s", raw)
		}
		created[id] = resp.Header.Get("X-Upstream")
	}
	nodes := map[string]bool{}
	for id, node := range created {
		nodes[node] = true
		resp, got := byID(t, "GET", gw.URL+"/v1/responses/"+id, "sk-acme-1")
		_, want := byID(t, "GET", nodeURL[node]+"/v1/responses/"+id, "")
		if resp.StatusCode != 200 || resp.Header.Get("X-Upstream") != node || got["id"] != id || !equalJSON(got, want) {
			t.Errorf("GET %s: %d from %q, want the node %s's answer", id, resp.StatusCode, resp.Header.Get("X-Upstream"), node)
		}
		// A follow-up goes to the node that holds its predecessor (the
		// other node answers 404 to it).
		fr, fm := postResponses(t, gw, respBody("and then?", `"previous_response_id":"`+id+`"`), acme...)
		if fr.StatusCode != 200 || fr.Header.Get("X-Upstream") != node {
			t.Errorf("follow-up of %s: %d from %q, want 200 from %s: %v", id, fr.StatusCode, fr.Header.Get("X-Upstream"), node, fm)
		}
		// Another tenant does not see it.
		if resp, m := byID(t, "GET", gw.URL+"/v1/responses/"+id, "sk-globex"); resp.StatusCode != 404 || m["error"] == nil {
			t.Errorf("another tenant's GET: %d %v", resp.StatusCode, m)
		}
	}
	if len(nodes) != 2 {
		t.Fatalf("all 8 responses came from %v: the test needs both nodes", nodes)
	}
	for id := range created {
		if resp, m := byID(t, "DELETE", gw.URL+"/v1/responses/"+id, "sk-acme-1"); resp.StatusCode != 200 || m["deleted"] != true {
			t.Errorf("DELETE %s: %d %v", id, resp.StatusCode, m)
		}
		if resp, _ := byID(t, "GET", gw.URL+"/v1/responses/"+id, "sk-acme-1"); resp.StatusCode != 404 {
			t.Errorf("GET after DELETE: %d", resp.StatusCode)
		}
		break
	}
	resp, m := byID(t, "GET", gw.URL+"/v1/responses/resp_unknown", "sk-acme-1")
	if e, _ := m["error"].(map[string]any); resp.StatusCode != 404 || e["type"] != "invalid_request_error" || !strings.Contains(e["message"].(string), "resp_unknown") {
		t.Errorf("unknown id: %d %v", resp.StatusCode, m)
	}
	// store: false: kept by no one, so not remembered.
	_, m = postResponses(t, gw, respBody("forget me", `"store":false`), acme...)
	if resp, _ := byID(t, "GET", gw.URL+"/v1/responses/"+m["id"].(string), "sk-acme-1"); resp.StatusCode != 404 {
		t.Errorf("a store:false response: GET %d", resp.StatusCode)
	}

	// A response the cache served: GET renders it from its entry, DELETE
	// forgets the id.
	askResp := func() (*http.Response, map[string]any) {
		return postResponses(t, gw, respBody("a cached question", ""), acme...)
	}
	askResp()
	var hit map[string]any
	testenv.Eventually(t, 5*time.Second, func() bool {
		r, m := askResp()
		hit = m
		return r.Header.Get("X-Cache") == "hit-exact"
	}, "no hit")
	hitID := hit["id"].(string)
	resp, got := byID(t, "GET", gw.URL+"/v1/responses/"+hitID, "sk-acme-1")
	if resp.StatusCode != 200 || !equalJSON(got, hit) || resp.Header.Get("X-Upstream") != "cache" {
		t.Errorf("GET of a cache-served response: %d %v, want %v", resp.StatusCode, got, hit)
	}
	// A follow-up of it: no node holds it, so frontdoor sends the
	// conversation (its input, its answer, then the new input) instead.
	a.ResetRecorded()
	b.ResetRecorded()
	fr, fm := postResponses(t, gw, respBody("and then?", `"previous_response_id":"`+hitID+`"`), acme...)
	if fr.StatusCode != 200 || fr.Header.Get("X-Cache") != "bypass" {
		t.Errorf("follow-up of a cache-served response: %d %q %v", fr.StatusCode, fr.Header.Get("X-Cache"), fm)
	}
	sent := append(a.Requests(), b.Requests()...)
	hitText := hit["output"].([]any)[0].(map[string]any)["content"].([]any)[0].(map[string]any)["text"].(string)
	want := `{"model":"qwen3-8b","input":[{"role":"user","content":"a cached question"},{"role":"assistant","content":` + string(mustJSON(hitText)) + `},{"role":"user","content":"and then?"}]}`
	if len(sent) != 1 || string(sent[0].Body) != want {
		t.Errorf("the follow-up reached the nodes as %d requests: %s\nwant %s", len(sent), firstBody(sent), want)
	}
	if resp, m := byID(t, "DELETE", gw.URL+"/v1/responses/"+hitID, "sk-acme-1"); resp.StatusCode != 200 || m["deleted"] != true {
		t.Errorf("DELETE of a cache-served response: %d %v", resp.StatusCode, m)
	}
	if resp, _ := byID(t, "GET", gw.URL+"/v1/responses/"+hitID, "sk-acme-1"); resp.StatusCode != 404 {
		t.Errorf("GET after DELETE of a cache-served response: %d", resp.StatusCode)
	}

	// Paths and methods.
	if resp, _ := byID(t, "PUT", gw.URL+"/v1/responses/resp_x", "sk-acme-1"); resp.StatusCode != 405 {
		t.Errorf("PUT: %d", resp.StatusCode)
	}
	if resp, _ := byID(t, "GET", gw.URL+"/v1/responses/resp_x/other", "sk-acme-1"); resp.StatusCode != 404 {
		t.Errorf("an unknown sub-path: %d", resp.StatusCode)
	}
	text := metricsText(t, gw)
	for series, least := range map[string]float64{`frontdoor_responses_by_id_total{result="found"}`: 10, `frontdoor_responses_by_id_total{result="unknown"}`: 10} {
		if v := metricValue(t, text, series); v < least {
			t.Errorf("%s = %v, want at least %v", series, v, least)
		}
	}
}

func equalJSON(a, b any) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return string(x) == string(y)
}

func mustJSON(v any) []byte {
	b, _ := json.Marshal(v)
	return b
}

func firstBody(reqs []sim.RecordedRequest) string {
	if len(reqs) == 0 {
		return "(none)"
	}
	return string(reqs[0].Body)
}

// TestResponsesSpill: a Responses request no node answers spills to the
// hosted API (its model mapped there and back), streamed and not, and a
// GET of its id goes there too; with spillover.responses off it is a 503,
// counted.
func TestResponsesSpill(t *testing.T) {
	broken := testenv.GPUSim(t, func(c *sim.Config) { c.FailRate = 1 })
	dash := dashSim(t, nil)
	cfg := testConfig(broken)
	spillConfig(t, &cfg, dash)
	gw := startGateway(t, cfg)
	c := sdkClient(gw.URL)
	p := respParams("qwen3-8b", "Where do overflow requests go?", "")
	for _, stream := range []bool{false, true} {
		var a sdkAnswer
		if stream {
			a = sdkStream(t, c, p)
		} else {
			a = sdkCreate(t, c, p)
		}
		// The first tries the node, which fails; by the second it is marked
		// unhealthy and the request goes to the hosted API at once.
		if a.header.Get("X-Upstream") != "spillover:dashscope" || a.header.Get("X-Upstream-Attempts") == "" || a.text == "" {
			t.Fatalf("stream=%v: X-Upstream %q after %q attempts: %+v", stream, a.header.Get("X-Upstream"), a.header.Get("X-Upstream-Attempts"), a)
		}
		resp, got := byID(t, "GET", gw.URL+"/v1/responses/"+a.id, "")
		if resp.StatusCode != 200 || got["id"] != a.id || got["model"] != "qwen3-8b" && got["model"] != "qwen-plus" || resp.Header.Get("X-Upstream") != "spillover:dashscope" {
			t.Errorf("GET of a spilled response: %d %v", resp.StatusCode, got)
		}
	}
	paths := map[string]int{}
	for _, r := range dash.Requests() {
		paths[r.Path]++
		if r.Path == "/compatible-mode/v1/responses" && !strings.Contains(string(r.Body), `"model":"qwen-plus"`) {
			t.Errorf("the hosted API got %s", r.Body)
		}
	}
	if paths["/compatible-mode/v1/responses"] != 2 {
		t.Errorf("the hosted API was asked %v", paths)
	}

	cfg.Spillover.Responses = false
	off := startGateway(t, cfg)
	resp, b := post(t, off.URL+"/v1/responses", respBody("no spill for me", ""))
	if resp.StatusCode != 503 || !strings.Contains(string(b), "spillover.responses") {
		t.Errorf("spillover.responses false: %d %s", resp.StatusCode, b)
	}
	if v := metricValue(t, metricsText(t, off), `frontdoor_spillover_skipped_total{reason="endpoint"}`); v != 1 {
		t.Errorf("frontdoor_spillover_skipped_total = %v, want 1", v)
	}
	if resp, b := post(t, off.URL+"/v1/chat/completions", chatBody("chat still spills", "")); resp.StatusCode != 200 || resp.Header.Get("X-Upstream") != "spillover:dashscope" {
		t.Errorf("chat with spillover.responses false: %d %s", resp.StatusCode, b)
	}
}

// TestResponsesSharedAcrossReplicas: with the cache on Redis, a response
// passed on by one replica is found by another (GET, follow-up, DELETE);
// with Redis down each replica knows its own, and says so.
func TestResponsesSharedAcrossReplicas(t *testing.T) {
	a, b := testenv.GPUSim(t, nil), testenv.GPUSim(t, nil)
	cfg := testConfig(a, b)
	r := testenv.StartRedis(t)
	cfg.Cache.Backend, cfg.Cache.VectorSearch, cfg.Redis.URL = "redis", "local", r.URL()
	cfg.Balancer.Policy = "round_robin"
	one, two := startGateway(t, cfg), startGateway(t, cfg)
	for i := range 4 {
		resp, m := postResponses(t, one, respBody([]string{"Why is the sky blue?", "How do bees make honey?", "Who built the pyramids?", "What is a black hole?"}[i], ""))
		if resp.StatusCode != 200 {
			t.Fatalf("%d: create: %d %v", i, resp.StatusCode, m)
		}
		id, node := m["id"].(string), resp.Header.Get("X-Upstream")
		if g, got := byID(t, "GET", two.URL+"/v1/responses/"+id, ""); g.StatusCode != 200 || got["id"] != id || g.Header.Get("X-Upstream") != node {
			t.Fatalf("%d: GET on the other replica: %d from %q, want %s", i, g.StatusCode, g.Header.Get("X-Upstream"), node)
		}
		if f, fm := postResponses(t, two, respBody("and then?", `"previous_response_id":"`+id+`"`)); f.StatusCode != 200 || f.Header.Get("X-Upstream") != node {
			t.Fatalf("%d: follow-up on the other replica: %d from %q, want %s: %v", i, f.StatusCode, f.Header.Get("X-Upstream"), node, fm)
		}
		if i == 0 {
			if d, _ := byID(t, "DELETE", two.URL+"/v1/responses/"+id, ""); d.StatusCode != 200 {
				t.Fatalf("DELETE on the other replica: %d", d.StatusCode)
			}
			if g, _ := byID(t, "GET", one.URL+"/v1/responses/"+id, ""); g.StatusCode != 404 {
				t.Fatalf("GET after DELETE elsewhere: %d", g.StatusCode)
			}
		}
	}
	r.Kill()
	_, m := postResponses(t, one, respBody("while Redis is down", ""))
	id := m["id"].(string)
	if g, _ := byID(t, "GET", one.URL+"/v1/responses/"+id, ""); g.StatusCode != 200 {
		t.Errorf("GET on the same replica with Redis down: %d", g.StatusCode)
	}
	if g, _ := byID(t, "GET", two.URL+"/v1/responses/"+id, ""); g.StatusCode != 404 {
		t.Errorf("GET on the other replica with Redis down: %d", g.StatusCode)
	}
	if v := metricValue(t, metricsText(t, one), `frontdoor_responses_shared_errors_total{op="put"}`); v < 1 {
		t.Errorf("put errors %v", v)
	}
	if v := metricValue(t, metricsText(t, two), `frontdoor_responses_shared_errors_total{op="get"}`); v < 1 {
		t.Errorf("get errors %v", v)
	}
	if !strings.Contains(two.Logs.String(), "shared id records in Redis failed") {
		t.Error("no WARN line for the failing Redis")
	}
}

type lazyGet func() string

func (f lazyGet) String() string { return f() }

// heldStore holds its first Put before storing anything, until release is
// closed: a write-back that has not landed.
type heldStore struct {
	cache.Store
	once    sync.Once
	entered chan struct{}
	release chan struct{}
}

func (s *heldStore) Put(ctx context.Context, e *cache.Entry, vec []float32, ttl time.Duration) error {
	first := false
	s.once.Do(func() { first = true; close(s.entered) })
	if first {
		<-s.release
	}
	return s.Store.Put(ctx, e, vec, ttl)
}

// GetByID passes through: GET /v1/responses/{id} needs it.
func (s *heldStore) GetByID(ctx context.Context, id string) (*cache.Entry, error) {
	return s.Store.(cache.EntryGetter).GetByID(ctx, id)
}

// TestResponsesByIDBeforeWriteBack: a response served from a finished
// flight, whose entry is not stored yet, is found by GET at once, then
// from its entry once stored.
func TestResponsesByIDBeforeWriteBack(t *testing.T) {
	cfg := testConfig(testenv.GPUSim(t, nil))
	cfg.Cache.Backend = "memory"
	store := &heldStore{Store: cache.NewMemoryStore(64<<20, cfg.Cache.Embedder.Dims), entered: make(chan struct{}), release: make(chan struct{})}
	gw := startGatewayWith(t, cfg, Deps{Store: store})
	released := false
	release := func() {
		if !released {
			released = true
			close(store.release)
		}
	}
	t.Cleanup(release) // before the gateway's shutdown
	ask := func() (*http.Response, map[string]any) { return postResponses(t, gw, respBody("asked twice", "")) }
	if r, _ := ask(); r.Header.Get("X-Cache") != "miss" {
		t.Fatalf("first ask: %q", r.Header.Get("X-Cache"))
	}
	select {
	case <-store.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the answer was never written back")
	}
	r, hit := ask()
	if r.Header.Get("X-Cache") != "hit-exact" {
		t.Fatalf("second ask, its write-back held: %q", r.Header.Get("X-Cache"))
	}
	id, _ := hit["id"].(string)
	if resp, got := byID(t, "GET", gw.URL+"/v1/responses/"+id, ""); resp.StatusCode != 200 || !equalJSON(got, hit) {
		t.Fatalf("GET before the write-back landed: %d %v, want %v", resp.StatusCode, got, hit)
	}
	release()
	testenv.Eventually(t, 5*time.Second, func() bool {
		resp, got := byID(t, "GET", gw.URL+"/v1/responses/"+id, "")
		return resp.StatusCode == 200 && equalJSON(got, hit) && resp.Header.Get("X-Cache-Entry") != ""
	}, "GET after the write-back landed: %v", lazyGet(func() string {
		resp, got := byID(t, "GET", gw.URL+"/v1/responses/"+id, "")
		return fmt.Sprint(resp.StatusCode, resp.Header, got, " want ", hit)
	}))
}

// TestResponsesRememberedUpToTheLimit: with remember_ids 2, a third
// response forgets the first (a clean 404), and the two latest are still
// found; 0 remembers none.
func TestResponsesRememberedUpToTheLimit(t *testing.T) {
	for _, limit := range []int{2, 0} {
		cfg := testConfig(testenv.GPUSim(t, nil))
		cfg.Responses.RememberIDs = limit
		gw := startGateway(t, cfg)
		var ids []string
		for i := range 3 {
			resp, m := postResponses(t, gw, respBody(fmt.Sprint("question ", i), `"max_output_tokens":8`), "Cache-Control", "no-store")
			id, _ := m["id"].(string)
			if resp.StatusCode != 200 || id == "" {
				t.Fatalf("create %d: %d %v", i, resp.StatusCode, m)
			}
			ids = append(ids, id)
		}
		for i, id := range ids {
			want := 200
			if i == 0 || limit == 0 {
				want = 404
			}
			if resp, m := byID(t, "GET", gw.URL+"/v1/responses/"+id, ""); resp.StatusCode != want {
				t.Errorf("remember_ids %d: GET of response %d: %d %v, want %d", limit, i, resp.StatusCode, m, want)
			}
		}
	}
}

// TestResponsesByIDNodeWithoutTheRoute: llm-d's simulator creates
// responses but answers GET /v1/responses/{id} with a plain-text 404. The
// client gets the OpenAI error envelope, with the node's words, not the
// node's bytes.
func TestResponsesByIDNodeWithoutTheRoute(t *testing.T) {
	node := testenv.LLMDSim(t, "qwen3-8b")
	cfg := testConfig()
	cfg.Nodes = []balancer.NodeConfig{{Name: "llmd", URL: node + "/v1", Kind: "vllm", Models: []string{"qwen3-8b"}, MaxConcurrency: 5, Weight: 1}}
	gw := startGateway(t, cfg)
	resp, m := postResponses(t, gw, respBody("question", `"max_output_tokens":8`))
	id, _ := m["id"].(string)
	if resp.StatusCode != 200 || id == "" {
		t.Fatalf("create: %d %v", resp.StatusCode, m)
	}
	got, em := byID(t, "GET", gw.URL+"/v1/responses/"+id, "")
	e, _ := em["error"].(map[string]any)
	if got.StatusCode != 404 || got.Header.Get("X-Upstream") != "llmd" || e["type"] != "invalid_request_error" || e["message"] != "Not Found" {
		t.Errorf("GET through frontdoor: %d from %q, %v; want the node's 404 as an OpenAI error", got.StatusCode, got.Header.Get("X-Upstream"), em)
	}
}
