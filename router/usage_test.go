package router

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3/option"

	"frontdoor/internal/testenv"
)

// chatUsage is a chat or completions answer's usage.
type chatUsage struct {
	PromptTokens        int `json:"prompt_tokens"`
	CompletionTokens    int `json:"completion_tokens"`
	TotalTokens         int `json:"total_tokens"`
	PromptTokensDetails *struct {
		CachedTokens int `json:"cached_tokens"`
	} `json:"prompt_tokens_details"`
}

func (u chatUsage) cached() int {
	if u.PromptTokensDetails == nil {
		return -1
	}
	return u.PromptTokensDetails.CachedTokens
}

// bodyUsage reads the usage of a JSON answer, or of a stream's usage chunk.
func bodyUsage(t *testing.T, b []byte) chatUsage {
	t.Helper()
	var v struct {
		Usage *chatUsage `json:"usage"`
	}
	if !strings.HasPrefix(string(b), "data:") {
		if err := json.Unmarshal(b, &v); err != nil || v.Usage == nil {
			t.Fatalf("no usage: %v %s", err, b)
		}
		return *v.Usage
	}
	for _, line := range strings.Split(string(b), "\n") {
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok || data == "[DONE]" {
			continue
		}
		v.Usage = nil
		if json.Unmarshal([]byte(data), &v) == nil && v.Usage != nil {
			return *v.Usage
		}
	}
	t.Fatalf("no usage chunk in %s", b)
	return chatUsage{}
}

// wantServedFromCache checks a hit against the usage rule
// (docs/endpoints.md#usage-on-cache-hits): the original counts, every prompt token
// cached, in the body and in X-Frontdoor-Cached.
func wantServedFromCache(t *testing.T, what string, h http.Header, u, orig chatUsage) {
	t.Helper()
	if u.PromptTokens != orig.PromptTokens || u.CompletionTokens != orig.CompletionTokens || u.TotalTokens != orig.TotalTokens || orig.PromptTokens == 0 {
		t.Errorf("%s: usage %+v, the miss's %+v", what, u, orig)
	}
	if u.cached() != orig.PromptTokens || h.Get("X-Frontdoor-Cached") != strconv.Itoa(orig.PromptTokens) {
		t.Errorf("%s: cached_tokens %d, X-Frontdoor-Cached %q, want %d", what, u.cached(), h.Get("X-Frontdoor-Cached"), orig.PromptTokens)
	}
}

// wantNoCacheClaim checks that a miss claims nothing of the cache: no
// X-Frontdoor-Cached, and cached_tokens absent or 0 (gpusim reports none).
func wantNoCacheClaim(t *testing.T, what string, h http.Header, u chatUsage) {
	t.Helper()
	if h.Get("X-Frontdoor-Cached") != "" || u.cached() > 0 {
		t.Errorf("%s: a miss claims the cache: X-Frontdoor-Cached %q, cached_tokens %d", what, h.Get("X-Frontdoor-Cached"), u.cached())
	}
}

// TestUsageOnHits: a hit on chat (exact and semantic, JSON and streamed
// with include_usage), completions and the Responses API keeps the usage
// of the answer it replays and says in cached_tokens and
// X-Frontdoor-Cached that the cache served every prompt token; a miss
// says nothing of the kind. Embeddings: TestEmbeddingsPartialBatch and
// TestEmbeddingsSDK.
func TestUsageOnHits(t *testing.T) {
	gw, _ := cacheGateway(t, "memory", func(c *Config) { c.Cache.Semantic.Threshold = 0.5 })

	body := cbody("What is the capital of France?", "")
	xc, resp, b := ask(t, gw, body)
	if xc != "miss" {
		t.Fatalf("first: X-Cache %q", xc)
	}
	orig := bodyUsage(t, b)
	wantNoCacheClaim(t, "chat miss", resp.Header, orig)

	resp, b = eventuallyHit(t, gw, body, "hit-exact")
	wantServedFromCache(t, "chat exact hit", resp.Header, bodyUsage(t, b), orig)
	resp, b = eventuallyHit(t, gw, cbody("What is the capital of France?", `"stream":true,"stream_options":{"include_usage":true}`), "hit-exact")
	wantServedFromCache(t, "streamed chat hit", resp.Header, bodyUsage(t, b), orig)
	resp, b = eventuallyHit(t, gw, cbody("what is the capital of france", ""), "hit-semantic")
	wantServedFromCache(t, "chat semantic hit", resp.Header, bodyUsage(t, b), orig)

	// A streamed miss without include_usage: no usage, no claim; the
	// gateway's own usage chunk is stripped.
	resp, b = post(t, gw.URL+"/v1/chat/completions", cbody("Name a river", `"stream":true`))
	if resp.Header.Get("X-Cache") != "miss" || resp.Header.Get("X-Frontdoor-Cached") != "" || strings.Contains(string(b), "cached_tokens") {
		t.Errorf("streamed miss: X-Cache %q, X-Frontdoor-Cached %q: %s", resp.Header.Get("X-Cache"), resp.Header.Get("X-Frontdoor-Cached"), b)
	}

	// Completions.
	cb := `{"model":"qwen3-8b","prompt":"Once upon a time","max_tokens":5,"temperature":0.7}`
	resp, b = post(t, gw.URL+"/v1/completions", cb)
	if resp.StatusCode != 200 || resp.Header.Get("X-Cache") != "miss" {
		t.Fatalf("completions miss: %d X-Cache %q: %s", resp.StatusCode, resp.Header.Get("X-Cache"), b)
	}
	corig := bodyUsage(t, b)
	wantNoCacheClaim(t, "completions miss", resp.Header, corig)
	testenv.Eventually(t, 5*time.Second, func() bool {
		resp, b = post(t, gw.URL+"/v1/completions", cb)
		return resp.Header.Get("X-Cache") == "hit-exact"
	}, "the completion never hit")
	wantServedFromCache(t, "completions hit", resp.Header, bodyUsage(t, b), corig)

	// Responses, through the official SDK: the typed field reads it.
	c := sdkClient(gw.URL)
	p := respParams("qwen3-8b", "What is the tallest mountain on Earth?", "You are a geography teacher.")
	var hr *http.Response
	miss, err := c.Responses.New(t.Context(), p, option.WithResponseInto(&hr))
	if err != nil || hr.Header.Get("X-Cache") != "miss" {
		t.Fatalf("responses miss: %v X-Cache %q", err, hr.Header.Get("X-Cache"))
	}
	if miss.Usage.InputTokensDetails.CachedTokens != 0 || hr.Header.Get("X-Frontdoor-Cached") != "" {
		t.Errorf("responses miss claims the cache: %d, %q", miss.Usage.InputTokensDetails.CachedTokens, hr.Header.Get("X-Frontdoor-Cached"))
	}
	testenv.Eventually(t, 5*time.Second, func() bool {
		hit, err := c.Responses.New(t.Context(), p, option.WithResponseInto(&hr))
		if err != nil || hr.Header.Get("X-Cache") != "hit-exact" {
			return false
		}
		if hit.Usage.InputTokens != miss.Usage.InputTokens || hit.Usage.OutputTokens != miss.Usage.OutputTokens || hit.Usage.TotalTokens != miss.Usage.TotalTokens ||
			hit.Usage.InputTokensDetails.CachedTokens != miss.Usage.InputTokens || hr.Header.Get("X-Frontdoor-Cached") != strconv.FormatInt(miss.Usage.InputTokens, 10) {
			t.Errorf("responses hit: usage %+v, X-Frontdoor-Cached %q; the miss's %+v", hit.Usage, hr.Header.Get("X-Frontdoor-Cached"), miss.Usage)
		}
		return true
	}, "the response never hit")
	s := c.Responses.NewStreaming(t.Context(), p, option.WithResponseInto(&hr))
	defer s.Close()
	var cached int64 = -1
	for s.Next() {
		if ev := s.Current(); ev.Type == "response.completed" {
			cached = ev.Response.Usage.InputTokensDetails.CachedTokens
		}
	}
	if s.Err() != nil || hr.Header.Get("X-Cache") != "hit-exact" || cached != miss.Usage.InputTokens || hr.Header.Get("X-Frontdoor-Cached") != strconv.FormatInt(cached, 10) {
		t.Errorf("streamed responses hit: %v, X-Cache %q, cached_tokens %d, X-Frontdoor-Cached %q, want %d", s.Err(), hr.Header.Get("X-Cache"), cached, hr.Header.Get("X-Frontdoor-Cached"), miss.Usage.InputTokens)
	}
}
