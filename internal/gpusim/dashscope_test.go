package gpusim

import (
	"strings"
	"testing"
	"time"
)

func TestDashScope(t *testing.T) {
	s := startServer(t, func(c *Config) {
		c.Kind = KindDashScope
		c.APIKey = "sk-ds"
		c.Models = []string{"qwen-plus"}
		c.OutputTokens = 6
	})
	c := newClient(t)
	auth := map[string]string{"Authorization": "Bearer sk-ds"}
	url := s.URL() + "/compatible-mode/v1/chat/completions"
	prompt := "think about it"
	noThink := `{"model":"qwen-plus","enable_thinking":false,"messages":[{"role":"user","content":"think about it"}]}`

	r := doReq(t, c, "POST", url, noThink, map[string]string{"Authorization": "Bearer wrong"})
	if r.status != 401 || string(r.body) != `{"error":{"code":"invalid_api_key","message":"Incorrect API key provided. ","type":"invalid_request_error"}}` {
		t.Errorf("wrong key: %d %s", r.status, r.body)
	}
	if r := doReq(t, c, "POST", url, noThink, nil); r.status != 401 {
		t.Errorf("missing key: %d %s", r.status, r.body)
	}

	for _, body := range []string{
		`{"model":"qwen-plus","messages":[{"role":"user","content":"hi"}]}`,
		`{"model":"qwen-plus","enable_thinking":true,"messages":[{"role":"user","content":"hi"}]}`,
		`{"model":"qwen-plus","enable_thinking":"false","messages":[{"role":"user","content":"hi"}]}`,
	} {
		r := doReq(t, c, "POST", url, body, auth)
		if r.status != 400 || string(r.body) != `{"error":{"code":"invalid_parameter_error","message":"parameter.enable_thinking must be set to false for non-streaming calls","type":"invalid_request_error"}}` {
			t.Errorf("%s: %d %s", body, r.status, r.body)
		}
	}

	r = doReq(t, c, "POST", url, noThink, auth)
	cc := decode[completion](t, r.body)
	if r.status != 200 || cc.Choices[0].Message.Content != ExpectedText(prompt, 6) || cc.Model != "qwen-plus" {
		t.Errorf("enable_thinking false: %d %s", r.status, r.body)
	}
	// The plain /v1 path works too.
	if r := doReq(t, c, "POST", s.URL()+"/v1/chat/completions", noThink, auth); r.status != 200 {
		t.Errorf("/v1 path: %d %s", r.status, r.body)
	}

	// Streaming without enable_thinking: reasoning first, then the answer.
	resp, cancel := openStreamH(t, c, url, `{"model":"qwen-plus","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"think about it"}]}`, auth)
	defer cancel()
	if resp.StatusCode != 200 {
		t.Fatalf("stream: %d", resp.StatusCode)
	}
	res := parseStream(t, resp)
	nReason := len(strings.Fields(ExpectedReasoning(prompt)))
	if res.reason != ExpectedReasoning(prompt) || nReason < 3 || nReason > 5 {
		t.Errorf("reasoning %q, want %q", res.reason, ExpectedReasoning(prompt))
	}
	if res.text != ExpectedText(prompt, 6) || !res.done {
		t.Errorf("answer %q", res.text)
	}
	// role, reasoning chunks, then content chunks: reasoning never after content.
	seenContent := false
	reasoningChunks := 0
	for _, ck := range res.chunks {
		if len(ck.Choices) == 0 {
			continue
		}
		d := ck.Choices[0].Delta
		if d.Content != nil && *d.Content != "" {
			seenContent = true
		}
		if d.ReasoningContent != nil {
			reasoningChunks++
			if seenContent {
				t.Error("reasoning_content after content")
			}
		}
	}
	if reasoningChunks != nReason {
		t.Errorf("%d reasoning chunks, want %d", reasoningChunks, nReason)
	}
	if u := res.usage; u == nil || u.CompletionTokens != 6+nReason || u.Details == nil || u.Details.ReasoningTokens != nReason {
		t.Errorf("usage %+v", res.usage)
	}

	// Streaming with enable_thinking false: no reasoning.
	resp2, cancel2 := openStreamH(t, c, url, `{"model":"qwen-plus","stream":true,"enable_thinking":false,"messages":[{"role":"user","content":"think about it"}]}`, auth)
	defer cancel2()
	if res := parseStream(t, resp2); res.reason != "" || res.text != ExpectedText(prompt, 6) {
		t.Errorf("enable_thinking false stream: %+v", res)
	}
}

func TestRPM(t *testing.T) {
	for _, kind := range []Kind{KindDashScope, KindVLLM} {
		s := startServer(t, func(c *Config) { c.Kind = kind; c.RPM = 3 })
		c := newClient(t)
		url := s.URL() + "/v1/chat/completions"
		body := `{"enable_thinking":false,"messages":[{"role":"user","content":"hi"}]}`
		for i := range 3 {
			if r := post(t, c, url, body); r.status != 200 {
				t.Fatalf("%s request %d: %d %s", kind, i+1, r.status, r.body)
			}
		}
		r := post(t, c, url, body)
		switch kind {
		case KindDashScope:
			if r.status != 429 || string(r.body) != `{"error":{"code":"Throttling.RateQuota","message":"Requests rate limit exceeded, please try again later.","type":"Throttling.RateQuota"}}` {
				t.Errorf("4th request: %d %s", r.status, r.body)
			}
		default:
			if e := decode[map[string]any](t, r.body); r.status != 429 || e["code"] != float64(429) {
				t.Errorf("4th request: %d %s", r.status, r.body)
			}
		}
		if st := s.Stats(); st.Completed != 3 || st.Rejected != 1 {
			t.Errorf("%s: Stats %+v", kind, st)
		}
	}

	// The bucket refills at RPM per minute.
	rl := newRateLimiter(3, time.Unix(0, 0))
	for i := range 3 {
		if !rl.allow(time.Unix(0, 0)) {
			t.Fatalf("burst request %d refused", i)
		}
	}
	if rl.allow(time.Unix(19, 0)) {
		t.Fatal("allowed before 20s refill")
	}
	if !rl.allow(time.Unix(20, 0)) || rl.allow(time.Unix(20, 0)) {
		t.Fatal("want exactly one request after 20s")
	}
}
