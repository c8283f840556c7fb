package router

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"frontdoor/balancer"
	sim "frontdoor/internal/gpusim"
	"frontdoor/internal/testenv"
)

// embeddingsGateway starts a gpusim (64-dimension vectors) and a gateway
// in front of it whose node lists the embedding model bge-m3, with the
// cache on backend ("memory", "redis" or "off") and the tenants acme and
// globex.
func embeddingsGateway(t *testing.T, backend string, mutate func(*Config)) (*testGateway, *sim.Server) {
	t.Helper()
	s := testenv.GPUSim(t, func(c *sim.Config) { c.EmbeddingDims, c.Models = 64, []string{"qwen3-8b", "bge-m3"} })
	cfg := testConfig(s)
	cfg.Nodes[0].Models = []string{"qwen3-8b", "bge-m3"}
	cfg.Cache.Backend = backend
	if backend == "redis" {
		cfg.Redis.URL = testenv.StartRedis(t).URL()
		cfg.Cache.VectorSearch = "local"
		cfg.Redis.KeyPrefix = "fdtest:"
	}
	t.Setenv("TEST_ACME_KEYS", "sk-acme")
	t.Setenv("TEST_GLOBEX_KEYS", "sk-globex")
	cfg.Tenants = []Tenant{{Name: "acme", APIKeysEnv: "TEST_ACME_KEYS"}, {Name: "globex", APIKeysEnv: "TEST_GLOBEX_KEYS"}}
	if mutate != nil {
		mutate(&cfg)
	}
	return startGateway(t, cfg), s
}

// embeddingsAnswer is an embeddings answer, its vectors read as float64s
// (as an SDK reads them) or kept as base64 strings.
type embeddingsAnswer struct {
	Object string `json:"object"`
	Data   []struct {
		Object    string          `json:"object"`
		Index     int             `json:"index"`
		Embedding json.RawMessage `json:"embedding"`
	} `json:"data"`
	Model string `json:"model"`
	Usage struct {
		PromptTokens        int `json:"prompt_tokens"`
		TotalTokens         int `json:"total_tokens"`
		PromptTokensDetails struct {
			CachedTokens int `json:"cached_tokens"`
		} `json:"prompt_tokens_details"`
	} `json:"usage"`
}

// vectors returns the answer's vectors by index, each as its float64s or
// its base64 text.
func (a embeddingsAnswer) vectors(t *testing.T) []any {
	t.Helper()
	out := make([]any, len(a.Data))
	for i, d := range a.Data {
		if d.Index != i || d.Object != "embedding" {
			t.Fatalf("data[%d] has index %d, object %q", i, d.Index, d.Object)
		}
		var v any
		if strings.HasPrefix(string(d.Embedding), `"`) {
			var s string
			_ = json.Unmarshal(d.Embedding, &s)
			v = s
		} else {
			var f []float64
			if err := json.Unmarshal(d.Embedding, &f); err != nil {
				t.Fatalf("data[%d].embedding: %v", i, err)
			}
			v = f
		}
		out[i] = v
	}
	return out
}

// embedVia posts an embeddings request to base (a gateway or a node) and
// returns its X-Cache and answer; it fails the test on a status but 200.
func embedVia(t *testing.T, base, body string, headers ...string) (string, embeddingsAnswer) {
	t.Helper()
	resp, b := post(t, base+"/v1/embeddings", body, headers...)
	if resp.StatusCode != 200 {
		t.Fatalf("POST %s/v1/embeddings: status %d: %s", base, resp.StatusCode, b)
	}
	var a embeddingsAnswer
	if err := json.Unmarshal(b, &a); err != nil || a.Object != "list" {
		t.Fatalf("not an embeddings answer: %v %s", err, b)
	}
	return resp.Header.Get("X-Cache"), a
}

func embeddingsBody(inputs []string, extra string) string {
	b, _ := json.Marshal(inputs)
	s := `{"model":"bge-m3","input":` + string(b)
	if extra != "" {
		s += "," + extra
	}
	return s + "}"
}

// waitEntries waits until the store holds at least n exact entries: the
// write-back runs after the answer was sent.
func waitEntries(t *testing.T, gw *testGateway, n int64) {
	t.Helper()
	testenv.Eventually(t, 5*time.Second, func() bool {
		st, err := gw.cache.Store().Stats(context.Background())
		return err == nil && st.Entries >= n
	}, "the store never held %d entries", n)
}

// A batch of 8 inputs of which 5 are cached sends the other 3 to the node
// (its own counter says so), and answers all 8 in order with the node's
// vectors: X-Cache partial, usage for the 3 only. The same batch is then a
// hit in either encoding, and an input repeated in one batch is computed
// once. Memory and Redis alike.
func TestEmbeddingsPartialBatch(t *testing.T) {
	for _, backend := range []string{"memory", "redis"} {
		t.Run(backend, func(t *testing.T) {
			gw, s := embeddingsGateway(t, backend, nil)
			inputs := []string{"alpha one", "bravo two", "charlie three", "delta four", "echo five", "foxtrot six", "golf seven", "hotel eight"}
			cached := []string{inputs[0], inputs[2], inputs[3], inputs[5], inputs[7]}
			missing := []string{inputs[1], inputs[4], inputs[6]}
			if xc, _ := embedVia(t, gw.URL, embeddingsBody(cached, "")); xc != "miss" {
				t.Fatalf("the first batch: X-Cache %q, want miss", xc)
			}
			waitEntries(t, gw, 5)

			direct := func(in []string, extra string) embeddingsAnswer {
				_, a := embedVia(t, s.URL(), embeddingsBody(in, extra))
				return a
			}
			want, wantUsage, cachedUsage := direct(inputs, ""), direct(missing, "").Usage, direct(cached, "").Usage
			before := s.Stats()
			resp, b := post(t, gw.URL+"/v1/embeddings", embeddingsBody(inputs, ""))
			var got embeddingsAnswer
			if err := json.Unmarshal(b, &got); err != nil || resp.StatusCode != 200 {
				t.Fatalf("status %d: %v %s", resp.StatusCode, err, b)
			}
			xc := resp.Header.Get("X-Cache")
			sent := s.Stats().EmbeddingInputs - before.EmbeddingInputs
			if xc != "partial" || sent != 3 || s.Stats().EmbeddingRequests-before.EmbeddingRequests != 1 {
				t.Fatalf("X-Cache %q with %d inputs sent to the node, want partial and 3 in one request", xc, sent)
			}
			if !reflect.DeepEqual(got.vectors(t), want.vectors(t)) || got.Model != want.Model {
				t.Fatalf("the partial answer differs from the node's for the whole batch")
			}
			// The usage rule (docs/endpoints.md#usage-on-cache-hits): the whole batch's
			// tokens, the cached inputs' (what they cost when computed,
			// here by the first batch) marked cached.
			wantPrompt, wantCached := wantUsage.PromptTokens+cachedUsage.PromptTokens, cachedUsage.PromptTokens
			if got.Usage.PromptTokens != wantPrompt || got.Usage.TotalTokens != wantPrompt || got.Usage.PromptTokensDetails.CachedTokens != wantCached ||
				wantUsage.PromptTokens == 0 || wantCached == 0 || resp.Header.Get("X-Frontdoor-Cached") != strconv.Itoa(wantCached) {
				t.Errorf("usage %+v, X-Frontdoor-Cached %q: want %d prompt tokens, %d of them cached",
					got.Usage, resp.Header.Get("X-Frontdoor-Cached"), wantPrompt, wantCached)
			}
			waitEntries(t, gw, 8)

			want64 := direct(inputs, `"encoding_format":"base64"`)
			before = s.Stats()
			xc, hit := embedVia(t, gw.URL, embeddingsBody(inputs, ""))
			if xc != "hit-exact" || !reflect.DeepEqual(hit.vectors(t), want.vectors(t)) ||
				hit.Usage.PromptTokens != wantPrompt || hit.Usage.TotalTokens != wantPrompt || hit.Usage.PromptTokensDetails.CachedTokens != wantPrompt {
				t.Fatalf("the batch again: X-Cache %q, usage %+v (want %d, all cached), same vectors %v", xc, hit.Usage, wantPrompt, reflect.DeepEqual(hit.vectors(t), want.vectors(t)))
			}
			xc, hit64 := embedVia(t, gw.URL, embeddingsBody(inputs, `"encoding_format":"base64"`))
			if xc != "hit-exact" || !reflect.DeepEqual(hit64.vectors(t), want64.vectors(t)) {
				t.Fatalf("base64: X-Cache %q, same as the node's %v", xc, reflect.DeepEqual(hit64.vectors(t), want64.vectors(t)))
			}
			if n := s.Stats().EmbeddingInputs - before.EmbeddingInputs; n != 0 {
				t.Fatalf("hits sent %d inputs to the node", n)
			}

			// An input twice in one batch is computed once; the cached one
			// is not sent.
			twice := []string{"india nine", inputs[0], "india nine"}
			xc, got = embedVia(t, gw.URL, embeddingsBody(twice, ""))
			if n := s.Stats().EmbeddingInputs - before.EmbeddingInputs; xc != "partial" || n != 1 {
				t.Fatalf("a repeated input: X-Cache %q, %d inputs sent, want partial and 1", xc, n)
			}
			if !reflect.DeepEqual(got.vectors(t), direct(twice, "").vectors(t)) {
				t.Fatalf("the answer with a repeated input differs from the node's")
			}
		})
	}
}

// The official Go SDK gets the same embeddings through frontdoor, on a miss
// and on a hit, as from the node itself: gpusim, and llm-d's simulator
// (an upstream frontdoor's authors did not write; skipped where absent).
func TestEmbeddingsSDK(t *testing.T) {
	t.Run("gpusim", func(t *testing.T) {
		gw, s := embeddingsGateway(t, "memory", nil)
		sdkSameAsNode(t, gw, s.URL())
	})
	t.Run("llm-d-inference-sim", func(t *testing.T) {
		node := testenv.LLMDSim(t, "bge-m3")
		cfg := testConfig()
		cfg.Nodes = []balancer.NodeConfig{{Name: "llmd", URL: node, Kind: "vllm", Models: []string{"bge-m3"}, MaxConcurrency: 5, Weight: 1}}
		cfg.Cache.Backend = "memory"
		sdkSameAsNode(t, startGateway(t, cfg), node)
	})
}

func sdkSameAsNode(t *testing.T, gw *testGateway, node string) {
	t.Helper()
	ctx := context.Background()
	through := openai.NewClient(option.WithBaseURL(gw.URL+"/v1/"), option.WithAPIKey("sk-acme"), option.WithMaxRetries(0))
	direct := openai.NewClient(option.WithBaseURL(node+"/v1/"), option.WithAPIKey("unused"), option.WithMaxRetries(0))
	stored := 0
	for _, in := range []openai.EmbeddingNewParamsInputUnion{
		{OfArrayOfStrings: []string{"The quick brown fox", "jumps over", "the lazy dog"}},
		{OfString: openai.String("A single sentence to embed")},
		{OfArrayOfTokenArrays: [][]int64{{101, 2023, 102}, {7, 8, 9, 10}}},
	} {
		params := openai.EmbeddingNewParams{Model: "bge-m3", Input: in, Dimensions: openai.Int(32)}
		want, err := direct.Embeddings.New(ctx, params)
		if err != nil {
			t.Fatalf("the node directly: %v", err)
		}
		for _, wantCache := range []string{"miss", "hit-exact"} {
			var resp *http.Response
			got, err := through.Embeddings.New(ctx, params, option.WithResponseInto(&resp))
			if err != nil {
				t.Fatalf("through frontdoor: %v", err)
			}
			if xc := resp.Header.Get("X-Cache"); xc != wantCache {
				t.Fatalf("X-Cache %q, want %q", xc, wantCache)
			}
			if len(got.Data) != len(want.Data) || got.Model != want.Model {
				t.Fatalf("%d embeddings of model %q, want %d of %q", len(got.Data), got.Model, len(want.Data), want.Model)
			}
			for i := range want.Data {
				if got.Data[i].Index != want.Data[i].Index || !reflect.DeepEqual(got.Data[i].Embedding, want.Data[i].Embedding) {
					t.Fatalf("%s: embedding %d differs from the node's", wantCache, i)
				}
			}
			// Miss or hit, the usage is the node's (docs/endpoints.md#usage-on-cache-hits);
			// a hit's is all cached, in an extra field the SDK keeps.
			if got.Usage.PromptTokens != want.Usage.PromptTokens || got.Usage.TotalTokens != want.Usage.TotalTokens {
				t.Errorf("%s: usage %+v, the node's %+v", wantCache, got.Usage, want.Usage)
			}
			details, cachedHeader := got.Usage.JSON.ExtraFields["prompt_tokens_details"], resp.Header.Get("X-Frontdoor-Cached")
			if wantCache == "miss" && cachedHeader != "" {
				t.Errorf("a miss claims X-Frontdoor-Cached %q", cachedHeader)
			}
			if wantCache == "hit-exact" {
				var d struct {
					CachedTokens int64 `json:"cached_tokens"`
				}
				if err := json.Unmarshal([]byte(details.Raw()), &d); err != nil || d.CachedTokens != want.Usage.PromptTokens || cachedHeader != strconv.FormatInt(d.CachedTokens, 10) {
					t.Errorf("hit: prompt_tokens_details %q (%v), X-Frontdoor-Cached %q, want %d cached", details.Raw(), err, cachedHeader, want.Usage.PromptTokens)
				}
			}
			if wantCache == "miss" {
				stored += len(want.Data)
				waitEntries(t, gw, int64(stored))
			}
		}
	}
}

// Bad embeddings requests get OpenAI's 4xx envelope, never a 5xx, and
// never reach the node.
func TestEmbeddingsBadInput(t *testing.T) {
	gw, s := embeddingsGateway(t, "memory", func(c *Config) {
		c.Tenants[0].Models = []string{"bge-m3"}
	})
	many := make([]string, 2049)
	for i := range many {
		many[i] = "x"
	}
	for _, tc := range []struct {
		body, param string
		status      int
	}{
		{`{"model":"bge-m3"}`, "input", 400},
		{`{"input":"x"}`, "model", 400},
		{`{"model":"bge-m3","input":""}`, "input", 400},
		{`{"model":"bge-m3","input":[]}`, "input", 400},
		{`{"model":"bge-m3","input":["a",""]}`, "input[1]", 400},
		{`{"model":"bge-m3","input":["a",[1]]}`, "input[1]", 400},
		{`{"model":"bge-m3","input":[1,"a"]}`, "input", 400},
		{`{"model":"bge-m3","input":[[1],[]]}`, "input[1]", 400},
		{`{"model":"bge-m3","input":[[1,-2]]}`, "input[0]", 400},
		{`{"model":"bge-m3","input":[1.5]}`, "input", 400},
		{`{"model":"bge-m3","input":[null]}`, "input[0]", 400},
		{`{"model":"bge-m3","input":{"a":1}}`, "input", 400},
		{`{"model":"bge-m3","input":"x","encoding_format":"hex"}`, "encoding_format", 400},
		{`{"model":"bge-m3","input":"x","dimensions":0}`, "dimensions", 400},
		{`{"model":"bge-m3","input":"x","dimensions":"8"}`, "dimensions", 400},
		{`{"model":"bge-m3","input":"x","input":"y"}`, "input", 400},
		{`{"model":"bge-m3","input":"\ud800"}`, "input", 400},
		{`{"model":"bge-m3","input":"x","user":1}`, "user", 400},
		{`[1]`, "", 400},
		{`{"model":`, "model", 400},
		{embeddingsBody(many, ""), "input", 400},
		{`{"model":"nope","input":"x"}`, "model", 404},     // globex may use any model
		{`{"model":"qwen3-8b","input":"x"}`, "model", 403}, // not in acme's allow-list
	} {
		key := "sk-acme"
		if tc.status == 404 {
			key = "sk-globex"
		}
		resp, b := post(t, gw.URL+"/v1/embeddings", tc.body, "Authorization", "Bearer "+key)
		var e struct {
			Error struct {
				Type  string  `json:"type"`
				Param *string `json:"param"`
			} `json:"error"`
		}
		_ = json.Unmarshal(b, &e)
		param := ""
		if e.Error.Param != nil {
			param = *e.Error.Param
		}
		if resp.StatusCode != tc.status || e.Error.Type == "" || param != tc.param {
			t.Errorf("%.80s: %d %s, want %d about %q", tc.body, resp.StatusCode, b, tc.status, tc.param)
		}
	}
	if resp, _ := post(t, gw.URL+"/v1/embeddings", `{"model":"bge-m3","input":"x"}`, "Content-Type", "text/plain"); resp.StatusCode != 415 {
		t.Errorf("text/plain: %d, want 415", resp.StatusCode)
	}
	if st := s.Stats(); st.EmbeddingRequests != 0 || st.Received != 0 {
		t.Errorf("the node saw %d embeddings requests of %d", st.EmbeddingRequests, st.Received)
	}
}

// No entry crosses tenants; Cache-Control and X-Cache-Only apply; a node
// that fails before answering is retried on another.
func TestEmbeddingsTenantsHeadersAndRetries(t *testing.T) {
	gw, s := embeddingsGateway(t, "memory", nil)
	body := embeddingsBody([]string{"shared words"}, "")
	acme, globex := []string{"Authorization", "Bearer sk-acme"}, []string{"Authorization", "Bearer sk-globex"}
	if xc, _ := embedVia(t, gw.URL, body, acme...); xc != "miss" {
		t.Fatalf("acme's first: %q", xc)
	}
	waitEntries(t, gw, 1)
	if xc, _ := embedVia(t, gw.URL, body, acme...); xc != "hit-exact" {
		t.Fatalf("acme's second: %q", xc)
	}
	if xc, _ := embedVia(t, gw.URL, body, globex...); xc != "miss" {
		t.Fatalf("globex asking what acme cached: X-Cache %q, want miss", xc)
	}
	// dimensions is part of the key; encoding_format is not.
	if xc, _ := embedVia(t, gw.URL, embeddingsBody([]string{"shared words"}, `"dimensions":16`), acme...); xc != "miss" {
		t.Fatalf("other dimensions: X-Cache %q, want miss", xc)
	}
	for _, tc := range []struct {
		header, value, want string
	}{
		{"Cache-Control", "no-store", "bypass"},
		{"Cache-Control", "no-cache", "miss"},
		{"X-Cache-Only", "1", "hit-exact"},
	} {
		if xc, _ := embedVia(t, gw.URL, body, append(acme, tc.header, tc.value)...); xc != tc.want {
			t.Errorf("%s: %s: X-Cache %q, want %q", tc.header, tc.value, xc, tc.want)
		}
	}
	before := s.Stats().EmbeddingInputs
	resp, b := post(t, gw.URL+"/v1/embeddings", embeddingsBody([]string{"never embedded"}, ""), append(acme, "X-Cache-Only", "1")...)
	if resp.StatusCode != 204 || len(b) != 0 || s.Stats().EmbeddingInputs != before {
		t.Errorf("lookup-only miss: %d %q, %d inputs sent", resp.StatusCode, b, s.Stats().EmbeddingInputs-before)
	}

	// Two nodes, the first failing: the second answers, after a retry.
	bad := testenv.GPUSim(t, func(c *sim.Config) { c.EmbeddingDims, c.Models = 64, []string{"bge-m3"} })
	bad.SetFailRate(1)
	good := testenv.GPUSim(t, func(c *sim.Config) { c.EmbeddingDims, c.Models = 64, []string{"bge-m3"} })
	cfg := testConfig(bad, good)
	for i := range cfg.Nodes {
		cfg.Nodes[i].Models = []string{"bge-m3"}
		cfg.Nodes[i].Weight = float64(2 - i) // the failing one first
	}
	two := startGateway(t, cfg)
	for range 4 {
		resp, b := post(t, two.URL+"/v1/embeddings", embeddingsBody([]string{"retried"}, ""))
		if resp.StatusCode != 200 || resp.Header.Get("X-Upstream") != "gpu-b" {
			t.Fatalf("status %d from %q after %s attempts: %s", resp.StatusCode, resp.Header.Get("X-Upstream"), resp.Header.Get("X-Upstream-Attempts"), b)
		}
	}
	if bad.Stats().Failed == 0 {
		t.Fatalf("the failing node was never tried: the retry is untested")
	}
	if m := metricsText(t, two); metricValue(t, m, `frontdoor_retries_total{reason="status_5xx"}`) == 0 ||
		metricValue(t, m, `frontdoor_requests_total{endpoint="embeddings",code="200"}`) != 4 {
		t.Errorf("metrics: retries %v, embeddings 200s %v", metricValue(t, m, `frontdoor_retries_total{reason="status_5xx"}`),
			metricValue(t, m, `frontdoor_requests_total{endpoint="embeddings",code="200"}`))
	}
}

// A node's embeddings answer that does not hold one vector per input sent
// is counted and never stored: a 502, whether it answers the client's own
// body or should have filled a partly cached batch (issue 45).
func TestEmbeddingsNodeAnswersBadly(t *testing.T) {
	node := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		// One vector, whatever the batch.
		_, _ = w.Write([]byte(`{"object":"list","data":[{"object":"embedding","index":0,"embedding":[0.5,0.25]}],"model":"m","usage":{"prompt_tokens":1,"total_tokens":1}}`))
	}))
	t.Cleanup(node.Close)
	cfg := testConfig()
	cfg.Nodes = []balancer.NodeConfig{{Name: "odd", URL: node.URL, Kind: "openai", Models: []string{"m"}, MaxConcurrency: 4, Weight: 1}}
	cfg.Cache.Backend = "memory"
	cfg.Balancer.Retries = 0
	gw := startGateway(t, cfg)
	if xc, _ := embedVia(t, gw.URL, `{"model":"m","input":"a"}`); xc != "miss" {
		t.Fatalf("one input: %q", xc)
	}
	waitEntries(t, gw, 1)
	resp, b := post(t, gw.URL+"/v1/embeddings", `{"model":"m","input":["a","b","c"]}`)
	if resp.StatusCode != 502 || !strings.Contains(string(b), "upstream_error") {
		t.Errorf("a partial batch the node answered short: %d %s, want 502", resp.StatusCode, b)
	}
	probedHealthy(t, gw) // a failure on an idle node marks it down
	resp, b = post(t, gw.URL+"/v1/embeddings", `{"model":"m","input":["x","y"]}`)
	if resp.StatusCode != 502 || !strings.Contains(string(b), "upstream_error") || resp.Header.Get("X-Cache") != "miss" {
		t.Errorf("a whole batch the node answered short: %d %s, want 502", resp.StatusCode, b)
	}
	if v := metricValue(t, metricsText(t, gw), `frontdoor_upstream_bad_answers_total{reason="invalid_embeddings"}`); v != 2 {
		t.Errorf("bad answers counted: %v, want 2", v)
	}
	time.Sleep(100 * time.Millisecond) // a write-back would have landed by now
	if st, _ := gw.cache.Store().Stats(context.Background()); st.Entries != 1 {
		t.Errorf("%d entries stored, want 1: a bad answer was stored", st.Entries)
	}
}

// The inputs sent to a node are charged against the tenant's token budget
// (a batch larger than a minute's budget is refused at once); inputs
// answered from the cache cost nothing. Requests show in the access log.
func TestEmbeddingsAdmissionAndAccessLog(t *testing.T) {
	gw, s := embeddingsGateway(t, "memory", func(c *Config) {
		c.Tenants[0].TokensPerMinute, c.Tenants[0].RPS, c.Tenants[0].Burst = 40, 100, 100
	})
	acme := []string{"Authorization", "Bearer sk-acme"}
	small := embeddingsBody([]string{"a short input"}, "")
	if xc, _ := embedVia(t, gw.URL, small, acme...); xc != "miss" {
		t.Fatalf("a small input: %q", xc)
	}
	long := embeddingsBody([]string{strings.Repeat("many words in a long input ", 20)}, "")
	resp, b := post(t, gw.URL+"/v1/embeddings", long, acme...)
	if resp.StatusCode != 429 || !strings.Contains(string(b), "tenant_tokens") {
		t.Fatalf("an input over the budget: %d %s, want 429", resp.StatusCode, b)
	}
	waitEntries(t, gw, 1)
	before := s.Stats().EmbeddingInputs
	for range 20 { // hits: no tokens charged, none sent
		if xc, _ := embedVia(t, gw.URL, small, acme...); xc != "hit-exact" {
			t.Fatalf("the small input again: %q", xc)
		}
	}
	if n := s.Stats().EmbeddingInputs - before; n != 0 {
		t.Fatalf("hits sent %d inputs", n)
	}
	testenv.Eventually(t, 2*time.Second, func() bool {
		return strings.Contains(gw.Logs.String(), `"path":"/v1/embeddings","status":200,"model":"bge-m3"`) &&
			strings.Contains(gw.Logs.String(), `"cache":"hit-exact"`)
	}, "no access log line for an embeddings request:\n%s", gw.Logs.String())
}
