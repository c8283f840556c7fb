package gpusim

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"
)

func TestVocabulary(t *testing.T) {
	seen := make(map[string]bool)
	word := regexp.MustCompile(`^[a-z]+$`)
	for i, w := range vocab {
		if !word.MatchString(w) {
			t.Errorf("vocab[%d] = %q: not a plain lower-case word", i, w)
		}
		if seen[w] {
			t.Errorf("vocab[%d] = %q: duplicate", i, w)
		}
		seen[w] = true
	}
}

func TestExpectedText(t *testing.T) {
	a := ExpectedText("hello", 12)
	if a != ExpectedText("hello", 12) {
		t.Fatal("ExpectedText is not deterministic")
	}
	if words := strings.Split(a, " "); len(words) != 12 {
		t.Fatalf("ExpectedText(hello, 12) has %d words: %q", len(words), a)
	}
	if b := ExpectedText("hello!", 12); b == a {
		t.Fatalf("different prompts gave the same text %q", a)
	}
	if p := ExpectedText("hello", 5); !strings.HasPrefix(a, p+" ") {
		t.Fatalf("shorter output %q is not a prefix of %q", p, a)
	}
	if ExpectedText("x", 0) != "" {
		t.Fatal("n=0 must give empty text")
	}
	if n := strings.Count(ExpectedReasoning("hello"), " ") + 1; n < 3 || n > 5 {
		t.Fatalf("ExpectedReasoning has %d words", n)
	}
	if PromptTokens("") != 1 || PromptTokens("abcd") != 1 || PromptTokens("abcde") != 2 {
		t.Fatal("PromptTokens is not (len+3)/4, at least 1")
	}
}

func TestPromptText(t *testing.T) {
	cases := map[string]string{
		`{"messages":[{"role":"system","content":"sys"},{"role":"user","content":[{"type":"text","text":"a"},{"type":"image_url","image_url":{"url":"x"}},{"type":"text","text":"b"}]},{"role":"assistant","content":null}]}`: "sys\na\nb",
		`{"prompt":"once upon"}`:      "once upon",
		`{"prompt":["one","two"]}`:    "one\ntwo",
		`{"prompt":"q\u00e9\n\"x\""}`: "qé\n\"x\"",
		`not json`:                    "",
	}
	for body, want := range cases {
		if got := PromptText([]byte(body)); got != want {
			t.Errorf("PromptText(%s) = %q, want %q", body, got, want)
		}
	}
}

func TestNonStreamingDeterministic(t *testing.T) {
	s := startServer(t, func(c *Config) { c.OutputTokens = 16; c.Models = []string{"m1", "m2"} })
	c := newClient(t)
	body := `{"model":"m2","messages":[{"role":"system","content":"be brief"},{"role":"user","content":[{"type":"text","text":"hello"},{"type":"text","text":"world"}]}]}`
	prompt := "be brief\nhello\nworld"
	if got := PromptText([]byte(body)); got != prompt {
		t.Fatalf("PromptText = %q", got)
	}

	r := post(t, c, s.URL()+"/v1/chat/completions", body)
	if r.status != 200 || r.header.Get("Content-Type") != "application/json" {
		t.Fatalf("status %d, content type %q: %s", r.status, r.header.Get("Content-Type"), r.body)
	}
	cc := decode[completion](t, r.body)
	if !strings.HasPrefix(cc.ID, "chatcmpl-") || cc.Object != "chat.completion" || cc.Model != "m2" || cc.Created == 0 {
		t.Errorf("envelope: %s", r.body)
	}
	ch := cc.Choices[0]
	if ch.Message.Role != "assistant" || ch.Message.Content != ExpectedText(prompt, 16) || ch.FinishReason != "stop" {
		t.Errorf("choice: %+v, want content %q", ch, ExpectedText(prompt, 16))
	}
	if u := cc.Usage; u.PromptTokens != PromptTokens(prompt) || u.CompletionTokens != 16 || u.TotalTokens != u.PromptTokens+16 {
		t.Errorf("usage %+v", u)
	}

	// max_tokens caps n; max_completion_tokens wins over it.
	for _, tc := range []struct {
		extra  string
		n      int
		finish string
	}{
		{`"max_tokens":5`, 5, "length"},
		{`"max_completion_tokens":3,"max_tokens":9`, 3, "length"},
		{`"max_tokens":16`, 16, "stop"},
		{`"max_tokens":100`, 16, "stop"},
		{`"max_tokens":0`, 16, "stop"},
	} {
		r := post(t, c, s.URL()+"/v1/chat/completions",
			`{"model":"m1",`+tc.extra+`,"messages":[{"role":"user","content":"cap me"}]}`)
		cc := decode[completion](t, r.body)
		if got := cc.Choices[0].Message.Content; got != ExpectedText("cap me", tc.n) {
			t.Errorf("%s: content %q, want %q", tc.extra, got, ExpectedText("cap me", tc.n))
		}
		if cc.Choices[0].FinishReason != tc.finish || cc.Usage.CompletionTokens != tc.n {
			t.Errorf("%s: finish %q, completion_tokens %d", tc.extra, cc.Choices[0].FinishReason, cc.Usage.CompletionTokens)
		}
	}

	// Completions.
	r = post(t, c, s.URL()+"/v1/completions", `{"model":"m1","prompt":"tell me","max_tokens":4}`)
	cc = decode[completion](t, r.body)
	if r.status != 200 || cc.Object != "text_completion" || !strings.HasPrefix(cc.ID, "cmpl-") ||
		cc.Choices[0].Text != ExpectedText("tell me", 4) || cc.Choices[0].FinishReason != "length" {
		t.Errorf("completion: %s", r.body)
	}
	// Model omitted: the first model answers.
	r = post(t, c, s.URL()+"/v1/completions", `{"prompt":"x"}`)
	if cc = decode[completion](t, r.body); cc.Model != "m1" {
		t.Errorf("default model: %s", r.body)
	}
	if st := s.Stats(); st.Completed != 8 || st.Received != 8 || st.Running != 0 {
		t.Errorf("Stats %+v", st)
	}
}

// streamResult is a parsed SSE response.
type streamResult struct {
	chunks  []chunk
	text    string // concatenated content / text deltas
	reason  string // concatenated reasoning_content deltas
	finish  string
	usage   *usage
	done    bool // ended with [DONE]
	roleFst bool // first chunk carried role "assistant"
}

func readStream(t *testing.T, c *http.Client, url, body string) streamResult {
	t.Helper()
	resp, cancel := openStream(t, c, url, body)
	defer cancel()
	return parseStream(t, resp)
}

// parseStream reads a whole SSE response and checks its framing.
func parseStream(t *testing.T, resp *http.Response) streamResult {
	t.Helper()
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("stream: status %d, content type %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	var res streamResult
	events := sseEvents(t, resp.Body)
	for i, e := range events {
		if e == "[DONE]" {
			if i != len(events)-1 {
				t.Fatalf("[DONE] is not last")
			}
			res.done = true
			continue
		}
		ck := decode[chunk](t, []byte(e))
		res.chunks = append(res.chunks, ck)
		if ck.Usage != nil {
			if len(ck.Choices) != 0 {
				t.Errorf("usage chunk has choices: %s", e)
			}
			res.usage = ck.Usage
			continue
		}
		if len(ck.Choices) != 1 {
			t.Fatalf("chunk without one choice: %s", e)
		}
		ch := ck.Choices[0]
		if i == 0 && ch.Delta.Role != nil && *ch.Delta.Role == "assistant" {
			res.roleFst = true
		}
		if ch.Delta.Content != nil {
			res.text += *ch.Delta.Content
		}
		if ch.Text != nil {
			res.text += *ch.Text
		}
		if ch.Delta.ReasoningContent != nil {
			res.reason += *ch.Delta.ReasoningContent
		}
		if ch.FinishReason != nil {
			if res.finish != "" {
				t.Errorf("two finish reasons")
			}
			res.finish = *ch.FinishReason
		}
	}
	return res
}

func TestStreamingDeterministic(t *testing.T) {
	s := startServer(t, func(c *Config) { c.OutputTokens = 12 })
	c := newClient(t)
	url := s.URL() + "/v1/chat/completions"
	prompt := "stream please"

	res := readStream(t, c, url, `{"model":"qwen3-8b","stream":true,"messages":[{"role":"user","content":"stream please"}]}`)
	if !res.roleFst || !res.done || res.finish != "stop" || res.usage != nil {
		t.Errorf("stream shape: role %v done %v finish %q usage %v", res.roleFst, res.done, res.finish, res.usage)
	}
	if res.text != ExpectedText(prompt, 12) {
		t.Errorf("stream text %q, want %q", res.text, ExpectedText(prompt, 12))
	}
	// 1 role + 12 tokens + 1 finish.
	if len(res.chunks) != 14 {
		t.Errorf("%d chunks, want 14", len(res.chunks))
	}
	for _, ck := range res.chunks {
		if ck.Object != "chat.completion.chunk" || ck.ID != res.chunks[0].ID || ck.Model != "qwen3-8b" {
			t.Errorf("chunk envelope %+v", ck)
		}
	}

	res = readStream(t, c, url, `{"model":"qwen3-8b","stream":true,"stream_options":{"include_usage":true},"max_tokens":4,"messages":[{"role":"user","content":"stream please"}]}`)
	if res.text != ExpectedText(prompt, 4) || res.finish != "length" || !res.done {
		t.Errorf("capped stream: text %q finish %q", res.text, res.finish)
	}
	if res.usage == nil || res.usage.CompletionTokens != 4 || res.usage.PromptTokens != PromptTokens(prompt) ||
		res.usage.TotalTokens != 4+PromptTokens(prompt) {
		t.Errorf("usage chunk %+v", res.usage)
	}
	if last := res.chunks[len(res.chunks)-1]; last.Usage == nil {
		t.Errorf("usage chunk is not the last before [DONE]")
	}
	res = readStream(t, c, url, `{"stream":true,"stream_options":{"include_usage":false},"messages":[{"role":"user","content":"stream please"}]}`)
	if res.usage != nil {
		t.Errorf("usage chunk sent with include_usage false")
	}

	// Completions stream.
	res = readStream(t, c, s.URL()+"/v1/completions", `{"model":"qwen3-8b","prompt":"once","stream":true,"stream_options":{"include_usage":true}}`)
	if res.text != ExpectedText("once", 12) || res.finish != "stop" || !res.done || res.usage == nil || res.roleFst {
		t.Errorf("completions stream: %+v", res)
	}
	if res.chunks[0].Object != "text_completion" || !strings.HasPrefix(res.chunks[0].ID, "cmpl-") {
		t.Errorf("completions chunk envelope %+v", res.chunks[0])
	}
	if st := s.Stats(); st.Completed != 4 || st.Cancelled != 0 {
		t.Errorf("Stats %+v", st)
	}
}

// TestStreamingIncremental reads a slow stream over a raw connection and
// checks tokens arrive as generated, not all at the end.
func TestStreamingIncremental(t *testing.T) {
	s := startServer(t, func(c *Config) {
		c.TTFT = 10 * time.Millisecond
		c.ITL = 50 * time.Millisecond
		c.OutputTokens = 20
	})
	conn, err := net.Dial("tcp", s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	body := `{"model":"qwen3-8b","stream":true,"messages":[{"role":"user","content":"slow"}]}`
	start := time.Now()
	fmt.Fprintf(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	var first time.Duration
	var text string
	tokens := 0
	for sc.Scan() {
		line, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok || line == "[DONE]" {
			continue
		}
		var ck chunk
		if err := json.Unmarshal([]byte(line), &ck); err != nil {
			t.Fatal(err)
		}
		if len(ck.Choices) == 1 && ck.Choices[0].Delta.Content != nil && *ck.Choices[0].Delta.Content != "" {
			if tokens == 0 {
				first = time.Since(start)
			}
			tokens++
			text += *ck.Choices[0].Delta.Content
		}
	}
	total := time.Since(start)
	if tokens != 20 || text != ExpectedText("slow", 20) {
		t.Fatalf("got %d tokens %q", tokens, text)
	}
	// First token at TTFT (10ms), the last 19 ITLs (950ms) later.
	if first > 300*time.Millisecond {
		t.Errorf("first token after %v: stream is buffered", first)
	}
	if total < 900*time.Millisecond || total > 3*time.Second {
		t.Errorf("stream took %v, want about 960ms", total)
	}
}

func TestErrors(t *testing.T) {
	type vllmErr struct {
		Object  string  `json:"object"`
		Message string  `json:"message"`
		Type    string  `json:"type"`
		Param   *string `json:"param"`
		Code    int     `json:"code"`
	}
	s := startServer(t, func(c *Config) { c.APIKey = "sk-test" })
	c := newClient(t)
	auth := map[string]string{"Authorization": "Bearer sk-test"}
	url := s.URL() + "/v1/chat/completions"
	cases := []struct {
		name, method, path, body string
		hdr                      map[string]string
		status                   int
		typ, msg                 string
	}{
		{"no key", "POST", "/v1/chat/completions", `{"messages":[]}`, nil, 401, "UnauthorizedError", ""},
		{"wrong key", "POST", "/v1/chat/completions", `{"messages":[]}`, map[string]string{"Authorization": "Bearer nope"}, 401, "UnauthorizedError", ""},
		{"models no key", "GET", "/v1/models", ``, nil, 401, "UnauthorizedError", ""},
		{"bad json", "POST", "/v1/chat/completions", `{"messages":`, auth, 400, "BadRequestError", ""},
		{"no messages", "POST", "/v1/chat/completions", `{"model":"qwen3-8b"}`, auth, 400, "BadRequestError", ""},
		{"no prompt", "POST", "/v1/completions", `{"model":"qwen3-8b"}`, auth, 400, "BadRequestError", ""},
		{"unknown model", "POST", "/v1/chat/completions", `{"model":"gpt-9","messages":[]}`, auth, 404, "NotFoundError", "The model `gpt-9` does not exist."},
		{"unknown path", "GET", "/v2/nothing", ``, auth, 404, "NotFoundError", ""},
		{"wrong method", "GET", "/v1/chat/completions", ``, auth, 405, "MethodNotAllowedError", ""},
	}
	for _, tc := range cases {
		r := doReq(t, c, tc.method, s.URL()+tc.path, tc.body, tc.hdr)
		e := decode[vllmErr](t, r.body)
		if r.status != tc.status || e.Object != "error" || e.Type != tc.typ || e.Code != tc.status || e.Param != nil ||
			e.Message == "" || (tc.msg != "" && e.Message != tc.msg) {
			t.Errorf("%s: status %d body %s", tc.name, r.status, r.body)
		}
	}
	if r := doReq(t, c, "GET", s.URL()+"/v1/models", "", auth); r.status != 200 ||
		string(r.body) != string(appendModels(nil, []string{"qwen3-8b"}, decode[struct {
			Data []struct{ Created int64 }
		}](t, r.body).Data[0].Created)) {
		t.Errorf("/v1/models: %d %s", r.status, r.body)
	}
	if r := doReq(t, c, "POST", url, `{"messages":[{"role":"user","content":"ok"}]}`, auth); r.status != 200 {
		t.Errorf("authorized request: %d %s", r.status, r.body)
	}
	// /health and /metrics need no key.
	if r := doReq(t, c, "GET", s.URL()+"/health", "", nil); r.status != 200 {
		t.Errorf("/health: %d", r.status)
	}
	if st := s.Stats(); st.Rejected != 6 || st.Completed != 1 || st.Received != 7 {
		t.Errorf("Stats %+v", st)
	}

	// TGI and DashScope error shapes.
	ts := startServer(t, func(c *Config) { c.Kind = KindTGI })
	r := post(t, c, ts.URL()+"/v1/chat/completions", `{"model":"nope","messages":[]}`)
	if te := decode[map[string]string](t, r.body); r.status != 404 || te["error"] == "" || te["error_type"] == "" || len(te) != 2 {
		t.Errorf("tgi error: %d %s", r.status, r.body)
	}
	ds := startServer(t, func(c *Config) { c.Kind = KindDashScope })
	r = post(t, c, ds.URL()+"/v1/chat/completions", `{"model":"nope","messages":[]}`)
	de := decode[map[string]map[string]string](t, r.body)
	if r.status != 404 || de["error"]["code"] != "model_not_found" || de["error"]["message"] == "" || de["error"]["type"] == "" {
		t.Errorf("dashscope error: %d %s", r.status, r.body)
	}
}

func TestMaxWaiting(t *testing.T) {
	for _, kind := range []Kind{KindVLLM, KindTGI, KindDashScope} {
		t.Run(string(kind), func(t *testing.T) {
			t.Parallel()
			s := startServer(t, func(c *Config) {
				c.Kind = kind
				c.MaxNumSeqs, c.MaxWaiting = 1, 1
				c.TTFT = time.Minute
			})
			c := newClient(t)
			url := s.URL() + "/v1/chat/completions"
			stream := `{"stream":true,"enable_thinking":false,"messages":[{"role":"user","content":"hold"}]}`
			_, cancel1 := openStream(t, c, url, stream)
			defer cancel1()
			_, cancel2 := openStream(t, c, url, stream)
			defer cancel2()
			eventually(t, 2*time.Second, "1 running, 1 waiting", func() bool {
				st := s.Stats()
				return st.Running == 1 && st.Waiting == 1
			})
			r := post(t, c, url, `{"enable_thinking":false,"messages":[{"role":"user","content":"one more"}]}`)
			if r.status != 429 {
				t.Fatalf("status %d: %s", r.status, r.body)
			}
			switch kind {
			case KindTGI:
				if string(r.body) != `{"error":"Model is overloaded","error_type":"overloaded"}` {
					t.Errorf("tgi 429 body %s", r.body)
				}
			case KindVLLM:
				e := decode[map[string]any](t, r.body)
				if e["object"] != "error" || e["code"] != float64(429) || e["type"] != "TooManyRequestsError" {
					t.Errorf("vllm 429 body %s", r.body)
				}
			case KindDashScope:
				e := decode[map[string]map[string]string](t, r.body)
				if e["error"]["code"] == "" || e["error"]["type"] == "" {
					t.Errorf("dashscope 429 body %s", r.body)
				}
			}
			if st := s.Stats(); st.Rejected != 1 || st.Waiting != 1 {
				t.Errorf("Stats %+v", st)
			}
		})
	}
}
