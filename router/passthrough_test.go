package router

import (
	"bytes"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"frontdoor/balancer"
	"frontdoor/internal/testenv"
)

// pathNode is an engine that serves paths the gateway does not know: it
// records what reaches it and answers each path with a fixed status.
type pathNode struct {
	*httptest.Server
	mu     sync.Mutex
	got    []seenRequest
	status atomic.Int32 // of every answer but /health and /metrics
}

type seenRequest struct {
	path, contentType, requestID string
	body                         []byte
}

func newPathNode(t *testing.T, status int) *pathNode {
	n := &pathNode{}
	n.status.Store(int32(status))
	n.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/health" || r.URL.Path == "/metrics" {
			return
		}
		if r.URL.Path == "/v1/models" { // the served-models check: it serves any model
			w.WriteHeader(http.StatusNotFound)
			return
		}
		b, _ := io.ReadAll(r.Body)
		n.mu.Lock()
		n.got = append(n.got, seenRequest{r.URL.RequestURI(), r.Header.Get("Content-Type"), r.Header.Get("X-Request-Id"), b})
		n.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(int(n.status.Load()))
		_, _ = w.Write([]byte(`{"node":"` + r.URL.Path + `","results":[{"index":1,"relevance_score":0.9}]}`))
	}))
	t.Cleanup(n.Close)
	return n
}

func (n *pathNode) requests() []seenRequest {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]seenRequest(nil), n.got...)
}

// Pass-through paths reach a node that lists the body's model, as they
// came (but for an alias's model, and a multipart body written again from
// what was read), with the node's answer passed back as it is; retried on
// another node, admitted by requests, counted, never cached; other paths
// stay a 404.
func TestPassthrough(t *testing.T) {
	failing, rerank, other := newPathNode(t, 503), newPathNode(t, 200), newPathNode(t, 200)
	cfg := testConfig()
	cfg.Nodes = []balancer.NodeConfig{
		{Name: "failing", URL: failing.URL, Kind: "vllm", Models: []string{"bge-reranker"}, MaxConcurrency: 4, Weight: 100},
		{Name: "rerank", URL: rerank.URL + "/v1", Kind: "vllm", Models: []string{"bge-reranker"}, MaxConcurrency: 4, Weight: 1},
		{Name: "other", URL: other.URL, Kind: "vllm", Models: []string{"whisper"}, MaxConcurrency: 4, Weight: 1},
	}
	cfg.Models = []balancer.ModelAlias{{Name: "reranker", Targets: []balancer.ModelTarget{{Model: "bge-reranker", Weight: 1}}}}
	cfg.Passthrough.Paths = []string{"/v1/rerank", "/v1/audio/*", "/tokenize"}
	cfg.Cache.Backend = "memory"
	t.Setenv("TEST_ACME_KEYS", "sk-acme")
	t.Setenv("TEST_SLOW_KEYS", "sk-slow")
	cfg.Tenants = []Tenant{{Name: "acme", APIKeysEnv: "TEST_ACME_KEYS", Models: []string{"bge-reranker", "reranker"}},
		{Name: "slow", APIKeysEnv: "TEST_SLOW_KEYS", RPS: 0.01, Burst: 1}}
	cfg.Balancer.Retries = 2
	gw := startGateway(t, cfg)
	acme := []string{"Authorization", "Bearer sk-acme"}

	body := `{"model":"bge-reranker","query":"q","documents":["a","b"],"top_n":1}`
	for i := range 2 { // never cached
		resp, b := post(t, gw.URL+"/v1/rerank?verbose=1", body, append(acme, "X-Request-Id", "pt-1")...)
		if resp.StatusCode != 200 || !strings.Contains(string(b), `"node":"/v1/rerank"`) || resp.Header.Get("X-Upstream") != "rerank" ||
			i == 0 && resp.Header.Get("X-Upstream-Attempts") != "2" || resp.Header.Get("X-Cache") != "" {
			t.Fatalf("rerank %d: %d %v %s", i, resp.StatusCode, resp.Header, b)
		}
	}
	if len(failing.requests()) == 0 {
		t.Fatal("the failing node was never tried: the retry is untested")
	}
	seen := rerank.requests()
	if len(seen) != 2 || seen[0].path != "/v1/rerank?verbose=1" || string(seen[0].body) != body || seen[0].requestID != "pt-1" {
		t.Fatalf("the node saw %+v", seen)
	}

	// An alias is resolved and the model it names is sent.
	resp, b := post(t, gw.URL+"/v1/rerank", `{"model":"reranker","query":"q","documents":["a"]}`, acme...)
	if seen = rerank.requests(); resp.StatusCode != 200 || string(seen[len(seen)-1].body) != `{"model":"bge-reranker","query":"q","documents":["a"]}` {
		t.Fatalf("alias: %d %s; the node saw %s", resp.StatusCode, b, seen[len(seen)-1].body)
	}

	// A multipart body is routed by its model field and written again.
	var form bytes.Buffer
	mw := multipart.NewWriter(&form)
	_ = mw.WriteField("model", "whisper")
	fw, _ := mw.CreateFormFile("file", "a.wav")
	_, _ = fw.Write([]byte("RIFF\x00\x01 audio bytes"))
	_ = mw.Close()
	resp, b = post(t, gw.URL+"/v1/audio/transcriptions", form.String(), "Content-Type", mw.FormDataContentType())
	if resp.StatusCode != 200 || resp.Header.Get("X-Upstream") != "other" {
		t.Fatalf("multipart: %d %s", resp.StatusCode, b)
	}
	got := other.requests()[0]
	_, params, _ := mime.ParseMediaType(got.contentType)
	mr := multipart.NewReader(bytes.NewReader(got.body), params["boundary"])
	fields := map[string]string{}
	for {
		p, err := mr.NextPart()
		if err != nil {
			break
		}
		v, _ := io.ReadAll(p)
		fields[p.FormName()+"|"+p.FileName()] = string(v)
	}
	if got.path != "/v1/audio/transcriptions" || fields["model|"] != "whisper" || fields["file|a.wav"] != "RIFF\x00\x01 audio bytes" {
		t.Fatalf("the node got %s with %q", got.path, fields)
	}

	for _, tc := range []struct {
		method, path, body, ct string
		headers                []string
		status                 int
	}{
		{"POST", "/v1/score", body, "application/json", nil, 404},                                          // not opted in
		{"POST", "/v1/rerankx", body, "application/json", nil, 404},                                        // not a prefix
		{"POST", "/v1/audio", body, "application/json", nil, 404},                                          // the prefix's own path is not below it
		{"GET", "/v1/rerank", "", "", nil, 405},                                                            //
		{"POST", "/v1/rerank", `{"query":"q"}`, "application/json", nil, 400},                              // no model
		{"POST", "/v1/rerank", `{"model":"bge-reranker","model":"whisper"}`, "application/json", nil, 400}, // ambiguous
		{"POST", "/v1/rerank", `{"model":"nope"}`, "application/json", nil, 404},                           // served by no node
		{"POST", "/v1/rerank", `{"model":"whisper"}`, "application/json", acme, 403},                       // not acme's
		{"POST", "/v1/rerank", "model=x", "application/x-www-form-urlencoded", nil, 415},                   //
	} {
		req, _ := http.NewRequest(tc.method, gw.URL+tc.path, strings.NewReader(tc.body))
		if tc.ct != "" {
			req.Header.Set("Content-Type", tc.ct)
		}
		for i := 0; i+1 < len(tc.headers); i += 2 {
			req.Header.Set(tc.headers[i], tc.headers[i+1])
		}
		r, err := httpClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(r.Body)
		r.Body.Close()
		if r.StatusCode != tc.status || !strings.Contains(string(b), `"error"`) {
			t.Errorf("%s %s %.40s: %d %s, want %d", tc.method, tc.path, tc.body, r.StatusCode, b, tc.status)
		}
	}

	// Admission by requests: the slow tenant's second request waits for
	// a token it does not get.
	slow := []string{"Authorization", "Bearer sk-slow"}
	if resp, b := post(t, gw.URL+"/v1/rerank", body, slow...); resp.StatusCode != 200 {
		t.Fatalf("slow's first: %d %s", resp.StatusCode, b)
	}
	if resp, b := post(t, gw.URL+"/v1/rerank", body, slow...); resp.StatusCode != 429 {
		t.Fatalf("slow's second: %d %s, want 429", resp.StatusCode, b)
	}

	// A node's own 4xx is passed on as it is.
	rerank.status.Store(422)
	failing.status.Store(422)
	resp, b = post(t, gw.URL+"/v1/rerank", body, acme...)
	if resp.StatusCode != 422 || !strings.Contains(string(b), `"node":"/v1/rerank"`) {
		t.Errorf("a node's 422: %d %s", resp.StatusCode, b)
	}
	m := metricsText(t, gw)
	if v := metricValue(t, m, `frontdoor_passthrough_requests_total{path="/v1/rerank"}`); v < 5 {
		t.Errorf("frontdoor_passthrough_requests_total for /v1/rerank: %v", v)
	}
	if v := metricValue(t, m, `frontdoor_requests_total{endpoint="passthrough",code="200"}`); v < 4 {
		t.Errorf("frontdoor_requests_total{endpoint=passthrough,code=200}: %v", v)
	}
}

// A path outside /v1 goes to the node's server root, as vLLM serves
// /tokenize: the same answer through frontdoor as from llm-d's simulator.
func TestPassthroughToServerRoot(t *testing.T) {
	node := testenv.LLMDSim(t, "qwen3-8b")
	cfg := testConfig()
	cfg.Nodes = []balancer.NodeConfig{{Name: "llmd", URL: node + "/v1", Kind: "vllm", Models: []string{"qwen3-8b"}, MaxConcurrency: 5, Weight: 1}}
	cfg.Passthrough.Paths = []string{"/tokenize"}
	gw := startGateway(t, cfg)
	body := `{"model":"qwen3-8b","prompt":"hello there, general kenobi"}`
	want, wb := post(t, node+"/tokenize", body)
	got, gb := post(t, gw.URL+"/tokenize", body)
	if want.StatusCode != 200 || got.StatusCode != 200 || string(gb) != string(wb) {
		t.Fatalf("through frontdoor %d %s, directly %d %s", got.StatusCode, gb, want.StatusCode, wb)
	}
}
