package router

import (
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	sim "frontdoor/internal/gpusim"
	"frontdoor/internal/testenv"
)

// apiError reads an OpenAI error body.
func apiError(t *testing.T, b []byte) (code, param, msg string) {
	t.Helper()
	var e struct {
		Error struct {
			Code    string `json:"code"`
			Param   string `json:"param"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if err := json.Unmarshal(b, &e); err != nil {
		t.Fatalf("not an error JSON: %v: %.200s", err, b)
	}
	return e.Error.Code, e.Error.Param, e.Error.Message
}

func ids(n int) string {
	return "[" + strings.TrimSuffix(strings.Repeat("7,", n), ",") + "]"
}

// Each bound of limits (max_messages, max_content_parts, max_token_ids)
// refuses an array one item over it with a 400 naming the array, on every
// endpoint it applies to; an array at the bound goes through.
func TestBodyBoundsOverHTTP(t *testing.T) {
	s := testenv.GPUSim(t, func(c *sim.Config) { c.TTFT, c.ITL = 0, 0 })
	cfg := testConfig(s)
	cfg.Limits.MaxMessages, cfg.Limits.MaxContentParts, cfg.Limits.MaxTokenIDs = 3, 2, 4
	gw := startGateway(t, cfg)
	probedHealthy(t, gw)

	msgs := func(n int) string {
		return `{"model":"qwen3-8b","max_tokens":4,"messages":[` + strings.TrimSuffix(strings.Repeat(`{"role":"user","content":"hi"},`, n), ",") + `]}`
	}
	parts := func(n int) string {
		return `{"model":"qwen3-8b","max_tokens":4,"messages":[{"role":"user","content":[` +
			strings.TrimSuffix(strings.Repeat(`{"type":"text","text":"hi"},`, n), ",") + `]}]}`
	}
	items := func(n int) string {
		return `{"model":"qwen3-8b","max_output_tokens":4,"input":[` + strings.TrimSuffix(strings.Repeat(`{"role":"user","content":"hi"},`, n), ",") + `]}`
	}
	for _, c := range []struct {
		name, path, body, param string // param "": within bounds, 200
	}{
		{"messages over", "/v1/chat/completions", msgs(4), "messages"},
		{"messages at", "/v1/chat/completions", msgs(3), ""},
		{"parts over", "/v1/chat/completions", parts(3), "messages[0].content"},
		{"parts at", "/v1/chat/completions", parts(2), ""},
		{"responses items over", "/v1/responses", items(4), "input"},
		{"prompt tokens over", "/v1/completions", `{"model":"qwen3-8b","max_tokens":4,"prompt":` + ids(5) + `}`, "prompt"},
		{"prompt token array over", "/v1/completions", `{"model":"qwen3-8b","max_tokens":4,"prompt":[` + ids(2) + `,` + ids(5) + `]}`, "prompt[1]"},
		{"prompt tokens at", "/v1/completions", `{"model":"qwen3-8b","max_tokens":4,"prompt":` + ids(4) + `}`, ""},
		{"embedding ids over", "/v1/embeddings", `{"model":"qwen3-8b","input":` + ids(5) + `}`, "input"},
		{"embedding id arrays over", "/v1/embeddings", `{"model":"qwen3-8b","input":[` + ids(1) + `,` + ids(5) + `]}`, "input[1]"},
		{"embedding ids at", "/v1/embeddings", `{"model":"qwen3-8b","input":` + ids(4) + `}`, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			resp, b := post(t, gw.URL+c.path, c.body)
			if c.param == "" {
				if resp.StatusCode != 200 {
					t.Fatalf("within bounds: %d %.300s", resp.StatusCode, b)
				}
				return
			}
			if resp.StatusCode != 400 {
				t.Fatalf("status %d, want 400: %.300s", resp.StatusCode, b)
			}
			if _, param, msg := apiError(t, b); param != c.param || !strings.Contains(msg, "more than") {
				t.Fatalf("param %q (want %q), message %q", param, c.param, msg)
			}
		})
	}
}

// The review's shapes under the default limits: an embeddings body of
// 200,000 token ids and a chat of 20,000 messages are 400s naming the
// array, refused before the tree is built (the Go heap grows by less than
// the body would cost as a tree).
func TestDefaultBodyBoundsOverHTTP(t *testing.T) {
	gw, _ := simAndGateway(t, 1, nil)
	for _, c := range []struct{ path, body, param string }{
		{"/v1/embeddings", `{"model":"qwen3-8b","input":` + ids(200_000) + `}`, "input"},
		{"/v1/chat/completions", `{"model":"qwen3-8b","messages":[` + strings.TrimSuffix(strings.Repeat(`{"role":"user","content":"hi"},`, 20_000), ",") + `]}`, "messages"},
	} {
		resp, b := post(t, gw.URL+c.path, c.body)
		if resp.StatusCode != 400 {
			t.Fatalf("%s: status %d, want 400: %.200s", c.path, resp.StatusCode, b)
		}
		if _, param, _ := apiError(t, b); param != c.param {
			t.Fatalf("%s: param %q, want %q", c.path, param, c.param)
		}
	}
}

// The bodies parsed at once share limits.parse_budget_bytes: while one
// request holds most of it (its answer is slow), a second waits
// parse_wait and gets a 503 with Retry-After, counted in the metric and
// /status; once the first is done the next goes through. A body costing
// more than the whole budget is a 413 at once.
func TestParseBudgetOverHTTP(t *testing.T) {
	s := testenv.GPUSim(t, func(c *sim.Config) { c.TTFT, c.ITL = 3*time.Second, 0 }) // the first request holds the budget this long
	cfg := testConfig(s)
	cfg.Limits.MaxBodyBytes = 64 << 10
	cfg.Limits.ParseBudgetBytes = 4 * 64 << 10 // 256 KiB: one 40 KB prompt (about 160 KiB) at a time
	cfg.Limits.ParseWait = 50e6
	gw := startGateway(t, cfg)
	probedHealthy(t, gw)
	body := chatBody(strings.Repeat("x", 40_000), `"max_tokens":2`)

	var wg sync.WaitGroup
	wg.Go(func() {
		if resp, b := post(t, gw.URL+"/v1/chat/completions", body); resp.StatusCode != 200 {
			t.Errorf("first request: %d %.300s", resp.StatusCode, b)
		}
	})
	waitFor(t, func() bool { return (operator{gw.Gateway}).Status().Admission.ParseBudget.InUseBytes > 0 })
	resp, b := post(t, gw.URL+"/v1/chat/completions", body)
	if resp.StatusCode != 503 || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("second request while the first holds the budget: %d (Retry-After %q), want 503 with Retry-After: %.300s",
			resp.StatusCode, resp.Header.Get("Retry-After"), b)
	}
	if code, _, _ := apiError(t, b); code != "parse_budget_full" {
		t.Fatalf("code %q, want parse_budget_full", code)
	}
	wg.Wait()
	if resp, b := post(t, gw.URL+"/v1/chat/completions", body); resp.StatusCode != 200 {
		t.Fatalf("after the first is done: %d %.300s", resp.StatusCode, b)
	}
	if n := metricValue(t, getBody(t, gw.URL+"/metrics"), `frontdoor_parse_budget_refused_total{reason="full"}`); n != 1 {
		t.Fatalf("refusals counted: %v, want 1", n)
	}
	if st := (operator{gw.Gateway}).Status().Admission.ParseBudget; st.Refused != 1 || st.InUseBytes != 0 {
		t.Fatalf("/status parse_budget: %+v, want 1 refused and nothing in use", st)
	}

	// 20,000 token ids: a 40 KB body whose tree would cost about 2.6 MB.
	resp, b = post(t, gw.URL+"/v1/embeddings", `{"model":"qwen3-8b","input":`+ids(20_000)+`}`)
	if resp.StatusCode != 413 {
		t.Fatalf("a body over the whole budget: %d, want 413: %.300s", resp.StatusCode, b)
	}
	if _, _, msg := apiError(t, b); !strings.Contains(msg, "parse_budget_bytes") {
		t.Fatalf("message %q does not name limits.parse_budget_bytes", msg)
	}
}

// waitFor polls cond for up to 10 s.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 10s")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
