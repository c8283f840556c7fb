package router

import (
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"frontdoor/cache"
	"frontdoor/embed"
	sim "frontdoor/internal/gpusim"
	"frontdoor/internal/testenv"
	"frontdoor/router/admin"
)

// semanticCases are stored questions and queries: a miss where the query
// asks something else (roles swapped, negation moved, another name, date,
// identifier or unit), a hit where only case, punctuation, spacing or a
// polite prefix differ. They run through HTTP at the default threshold.
var semanticCases = []struct {
	name, stored, query string
	hit                 bool
}{
	// English.
	{"en role swap", "Is a dog bigger than a cat?", "Is a cat bigger than a dog?", false},
	{"en role swap 2", "Did Alice beat Bob at chess?", "Did Bob beat Alice at chess?", false},
	{"en moved negation", "Why does the server not start when the disk is full?", "Why does the server start when the disk is not full?", false},
	{"en swapped names in a comparison of roles", "Does Alice pay Bob's rent?", "Does Bob pay Alice's rent?", false},
	{"en other name", "What did Marie Curie discover?", "What did Pierre Curie discover?", false},
	{"en other name, long question", "What is the best way to learn the piano as an adult if I practise every evening with Anna after work?",
		"What is the best way to learn the piano as an adult if I practise every evening with Maria after work?", false},
	{"en other date", "What is the weather in Paris on Monday?", "What is the weather in Paris on Friday?", false},
	{"en other identifier", "What does getUserName return in the SDK?", "What does getUserById return in the SDK?", false},
	{"en other unit", "How long does it take to run 10 km?", "How long does it take to run 10 miles?", false},
	{"en order of conversion", "How do I convert kilograms to pounds?", "How do I convert pounds to kilograms?", false},
	{"en case", "How do I reverse a linked list in Python?", "HOW DO I REVERSE A LINKED LIST IN PYTHON?", true},
	{"en punctuation and spacing", "What is the capital of Australia?", "what is   the capital of australia", true},
	{"en polite prefix", "Explain how TCP slow start works", "Please explain how TCP slow start works", true},
	{"en questions reordered", "Who wrote Pride and Prejudice? When was it published?", "When was it published? Who wrote Pride and Prejudice?", true},
	// Chinese.
	{"zh role swap", "张三比李四高吗", "李四比张三高吗", false},
	{"zh route reversed", "从北京到上海的高铁要多久", "从上海到北京的高铁要多久", false},
	{"zh moved negation", "为什么不下雨的时候会打雷", "为什么下雨的时候不会打雷", false},
	{"zh other date", "今天上海的天气怎么样", "明天上海的天气怎么样", false},
	{"zh other unit", "跑10公里需要多长时间", "跑10英里需要多长时间", false},
	{"zh other title", "《红楼梦》的作者是谁", "《水浒传》的作者是谁", false},
	{"zh punctuation", "微信聊天记录怎么恢复？", "微信聊天记录怎么恢复", true},
	{"zh full-width and spacing", "如何学习Python编程", "如何学习 Ｐｙｔｈｏｎ 编程？", true},
	{"zh polite prefix", "怎样才能提高英语口语水平", "请问怎样才能提高英语口语水平", true},
}

// TestSemanticCacheNeverAnswersAnotherQuestion is the quality table of
// issue 14, through the public HTTP interface at the default threshold.
func TestSemanticCacheNeverAnswersAnotherQuestion(t *testing.T) {
	gw, _ := cacheGateway(t, "memory", nil)
	for _, tc := range semanticCases {
		askStored(t, gw, cbody(tc.stored, ""))
	}
	for _, tc := range semanticCases {
		t.Run(tc.name, func(t *testing.T) {
			xc, resp, _ := ask(t, gw, cbody(tc.query, ""))
			hit := strings.HasPrefix(xc, "hit-")
			if hit != tc.hit {
				t.Errorf("%q after %q: X-Cache %q (similarity %s), want hit %v",
					tc.query, tc.stored, xc, resp.Header.Get("X-Cache-Similarity"), tc.hit)
			}
		})
	}
	// Each rejection is counted by reason.
	mb := getBody(t, gw.URL+"/metrics")
	for _, g := range []string{"order", "negation"} {
		if metricValue(t, mb, `frontdoor_cache_guard_rejections_total{guard="`+g+`"}`) < 1 {
			t.Errorf("no rejection counted for the %s guard", g)
		}
	}
}

// TestSemanticEntityGuardOverHTTP lowers the threshold so that the
// embedder lets candidates with another name, date, identifier or unit
// through: the entity guard alone turns them into misses, and counts them.
func TestSemanticEntityGuardOverHTTP(t *testing.T) {
	gw, _ := cacheGateway(t, "memory", func(c *Config) { c.Cache.Semantic.Threshold = 0.4 })
	pairs := [][2]string{
		{"What did Marie Curie discover?", "What did Pierre Curie discover?"},
		{"What is the weather in Paris on Monday?", "What is the weather in Paris on Friday?"},
		{"What does getUserName return in the SDK?", "What does getUserById return in the SDK?"},
		{"How long does it take to run 10 km?", "How long does it take to run 10 miles?"},
		{"今天上海的天气怎么样", "明天上海的天气怎么样"},
		{"《红楼梦》的作者是谁", "《水浒传》的作者是谁"},
	}
	for _, p := range pairs {
		askStored(t, gw, cbody(p[0], ""))
		if xc, _, _ := ask(t, gw, cbody(p[1], "")); xc != "miss" {
			t.Errorf("%q after %q: X-Cache %q, want miss", p[1], p[0], xc)
		}
	}
	if n := metricValue(t, getBody(t, gw.URL+"/metrics"), `frontdoor_cache_guard_rejections_total{guard="entity"}`); n < float64(len(pairs)) {
		t.Errorf("entity rejections counted: %v, want >= %d", n, len(pairs))
	}
}

func getBody(t *testing.T, url string) string {
	t.Helper()
	resp, err := httpClient.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// TestRemoteEmbedderEndToEnd runs the semantic cache on an OpenAI-compatible
// embedder (gpusim's /v1/embeddings), then takes the embedder down: every
// request is still answered (0 5xx), the failures are counted, logged at
// WARN a bounded number of times, and shown in /status.
func TestRemoteEmbedderEndToEnd(t *testing.T) {
	embedSim := testenv.GPUSim(t, func(c *sim.Config) { c.EmbeddingDims = 256 })
	gw, _ := cacheGateway(t, "memory", func(c *Config) {
		c.Cache.Embedder = embed.Config{Kind: embed.KindOpenAI, URL: embedSim.URL() + "/v1", Model: "bge-m3", Dims: 256}
		if err := c.Cache.Embedder.Validate(); err != nil {
			t.Fatal(err)
		}
	})
	askStored(t, gw, cbody("How do I sort a list in Go?", ""))
	resp, _ := eventuallyHit(t, gw, cbody("how do I sort a list in go", ""), "hit-semantic")
	if resp.Header.Get("X-Cache-Similarity") == "" {
		t.Fatal("no similarity on a semantic hit")
	}
	if n := countRecorded(embedSim, "/v1/embeddings"); n < 2 {
		t.Fatalf("the embedder saw %d calls", n)
	}

	// Outage: first the embedder answers 500, then it is gone.
	embedSim.SetFailRate(1)
	statuses := fireDistinct(t, gw, "outage-a", 30)
	if err := embedSim.Shutdown(t.Context()); err != nil {
		t.Fatal(err)
	}
	for code, n := range fireDistinct(t, gw, "outage-b", 30) {
		statuses[code] += n
	}
	if statuses[200] != 60 {
		t.Fatalf("statuses during the embedder outage: %v, want 60 × 200", statuses)
	}
	// The exact cache still answers.
	if xc, _, _ := ask(t, gw, cbody("How do I sort a list in Go?", "")); xc != "hit-exact" {
		t.Errorf("exact lookup during the outage: X-Cache %q", xc)
	}
	mb := getBody(t, gw.URL+"/metrics")
	if metricValue(t, mb, `frontdoor_cache_errors_total{op="embed"}`) < 1 || metricValue(t, mb, `frontdoor_cache_embed_skipped_total`) < 60 {
		t.Errorf("embed errors %v, skipped %v", metricValue(t, mb, `frontdoor_cache_errors_total{op="embed"}`),
			metricValue(t, mb, `frontdoor_cache_embed_skipped_total`))
	}
	if metricValue(t, mb, `frontdoor_cache_embedder_up`) != 0 {
		t.Error("frontdoor_cache_embedder_up is not 0 during the outage")
	}
	if n := strings.Count(gw.Logs.String(), "cache: embedder failed"); n < 1 || n > 3 {
		t.Errorf("%d WARN lines for the embedder's failures, want 1 to 3 (rate-limited)", n)
	}
	var st struct {
		Cache struct {
			Embedder *cache.EmbedderHealth `json:"embedder"`
		} `json:"cache"`
	}
	if err := json.Unmarshal([]byte(getBody(t, gw.URL+"/status")), &st); err != nil || st.Cache.Embedder == nil {
		t.Fatalf("status: %v %+v", err, st)
	}
	if e := st.Cache.Embedder; e.State == "ok" || e.Failures < 1 || e.Name != "openai:bge-m3" {
		t.Errorf("embedder status %+v", e)
	}
}

// fireDistinct sends n distinct questions concurrently and counts statuses.
func fireDistinct(t *testing.T, gw *testGateway, prefix string, n int) map[int]int {
	t.Helper()
	var (
		mu       sync.Mutex
		wg       sync.WaitGroup
		statuses = map[int]int{}
	)
	for i := range n {
		wg.Go(func() {
			body := cbody(prefix+" question number "+strings.Repeat("x", i), "")
			req, _ := http.NewRequest(http.MethodPost, gw.URL+"/v1/chat/completions", strings.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			resp, err := httpClient.Do(req)
			code := 0
			if err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				code = resp.StatusCode
			}
			mu.Lock()
			statuses[code]++
			mu.Unlock()
		})
		if i%5 == 4 {
			wg.Wait() // five at a time: the node takes 10, and saturation is not under test
		}
	}
	wg.Wait()
	return statuses
}

func countRecorded(s *sim.Server, path string) int {
	n := 0
	for _, r := range s.Requests() {
		if r.Path == path {
			n++
		}
	}
	return n
}

// TestSemanticThresholdPerTenantAndModel: the same reworded question hits
// for a tenant whose threshold is low, and misses for one on the default.
func TestSemanticThresholdPerTenantAndModel(t *testing.T) {
	gw, _ := cacheGateway(t, "memory", func(c *Config) {
		c.Tenants[0].CacheThreshold = 0.5                                       // acme
		c.Tenants[1].CacheModelThresholds = map[string]float64{"qwen3-8b": 0.5} // globex, one model
	})
	acme, globex := []string{"Authorization", "Bearer sk-acme-1"}, []string{"Authorization", "Bearer sk-globex"}
	stored, reworded := "How can I make my sourdough bread rise more?", "how to get sourdough bread to rise more"
	for _, h := range [][]string{acme, globex} {
		askStored(t, gw, cbody(stored, ""), h...)
		resp, _ := eventuallyHit(t, gw, cbody(reworded, ""), "hit-semantic", h...)
		if s, _ := strconv.ParseFloat(resp.Header.Get("X-Cache-Similarity"), 64); s >= 0.95 || s < 0.5 {
			t.Fatalf("similarity %v: the test needs one between 0.5 and the default 0.95", s)
		}
	}
	// globex's low threshold is for qwen3-8b only.
	v2 := strings.Replace(cbody(stored, ""), `"qwen3-8b"`, `"qwen3-8b-v2"`, 1)
	askStored(t, gw, v2, globex...)
	if xc, _, _ := ask(t, gw, strings.Replace(cbody(reworded, ""), `"qwen3-8b"`, `"qwen3-8b-v2"`, 1), globex...); xc != "miss" {
		t.Errorf("globex on qwen3-8b-v2: X-Cache %q, want miss at the default threshold", xc)
	}
	cfg := DefaultConfig()
	cfg.Tenants = []Tenant{{Name: "x", CacheThreshold: 1.5, CacheModelThresholds: map[string]float64{"m": 0}}}
	problems := strings.Join(cfg.Problems(), "\n")
	for _, want := range []string{"tenants[0].cache_threshold", "tenants[0].cache_model_thresholds.m"} {
		if !strings.Contains(problems, want) {
			t.Errorf("problems lack %q:\n%s", want, problems)
		}
	}
}

// TestExplainAHit: a semantic hit names its entry in X-Cache-Matched, and
// GET /admin/cache/{id} shows that entry, with its question only when the
// config allows it.
func TestExplainAHit(t *testing.T) {
	forEachBackend(t, func(t *testing.T, backend string) {
		for _, show := range []bool{false, true} {
			gw, _ := cacheGateway(t, backend, func(c *Config) { c.Admin.ShowCachedQuestions = show })
			askStored(t, gw, cbody("What is the tallest mountain in Japan?", ""))
			resp, _ := eventuallyHit(t, gw, cbody("what is the tallest mountain in japan", ""), "hit-semantic")
			id := resp.Header.Get("X-Cache-Matched")
			if id == "" || id != resp.Header.Get("X-Cache-Entry") {
				t.Fatalf("X-Cache-Matched %q, X-Cache-Entry %q", id, resp.Header.Get("X-Cache-Entry"))
			}
			for _, path := range []string{"/admin/cache/" + id, "/admin/cache/entries/" + id} {
				var v admin.EntryView
				if err := json.Unmarshal([]byte(getBody(t, gw.URL+path)), &v); err != nil || v.ID != id || !v.Semantic || v.Model == "" {
					t.Fatalf("%s: %v %+v", path, err, v)
				}
				if show != (v.Question != nil && *v.Question == "What is the tallest mountain in Japan?") || show == (v.Hidden != "") {
					t.Errorf("show %v: question %v, hidden %q", show, v.Question, v.Hidden)
				}
			}
			if code := statusOf(t, gw.URL+"/admin/cache/0123456789abcdef"); code != 404 {
				t.Errorf("unknown entry: %d", code)
			}
		}
	})
}

func statusOf(t *testing.T, url string) int {
	t.Helper()
	resp, err := httpClient.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// TestSemanticSkipsQueriesLongerThanTheEmbedderReads: a last user turn
// longer than cache.embedder.max_input_bytes is cached by its exact key
// only. Its vector would stand for its head and tail, so two long texts
// that differ in the middle alone would match at similarity 1.
func TestSemanticSkipsQueriesLongerThanTheEmbedderReads(t *testing.T) {
	gw, _ := cacheGateway(t, "memory", func(c *Config) { c.Cache.Embedder.MaxInputBytes = 1024 })
	head := strings.Repeat("The contract between the two parties was signed in spring. ", 12)
	tail := strings.Repeat("Please summarise the obligations of each party in one line. ", 12)
	long := func(middle string) string { return cbody(head+middle+tail, "") }
	first := long("keep the summary formal and brief for the lawyers. ")
	ask(t, gw, first)
	testenv.Eventually(t, 5*time.Second, func() bool {
		xc, _, _ := ask(t, gw, first)
		return xc == "hit-exact"
	}, "the long question was not stored for its exact key")
	if xc, resp, _ := ask(t, gw, long("keep the summary playful and rhyming for the children. ")); xc != "miss" {
		t.Errorf("a long question that differs in the middle: X-Cache %q (similarity %s), want miss", xc, resp.Header.Get("X-Cache-Similarity"))
	}
	if v := metricValue(t, metricsText(t, gw), `frontdoor_cache_semantic_skipped_total{reason="query_too_long"}`); v < 2 {
		t.Errorf("query_too_long counted %v times, want at least 2", v)
	}
	// A question within the bound still gets its semantic lookup.
	askStored(t, gw, cbody("What is the capital of France?", ""))
	if xc, _, _ := ask(t, gw, cbody("what is the capital of france", "")); xc != "hit-semantic" {
		t.Errorf("a short reworded question: X-Cache %q, want hit-semantic", xc)
	}
}
