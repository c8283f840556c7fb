package router

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"frontdoor/adapters"
	sim "frontdoor/internal/gpusim"
	"frontdoor/internal/testenv"
	"frontdoor/internal/units"
	"frontdoor/router/admin"
)

func TestChatNonStreaming(t *testing.T) {
	gw, _ := simAndGateway(t, 1, nil)
	prompt := "What is the capital of France?"
	resp, body := post(t, gw.URL+"/v1/chat/completions", chatBody(prompt, `"max_tokens":12`), "X-Request-Id", "req-123")
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	if got := resp.Header.Get("X-Request-Id"); got != "req-123" {
		t.Fatalf("X-Request-Id = %q, want the client's", got)
	}
	if resp.Header.Get("X-Upstream") != "gpu-a" || resp.Header.Get("X-Upstream-Attempts") != "1" {
		t.Fatalf("upstream headers: %v", resp.Header)
	}
	var cc struct {
		Object  string `json:"object"`
		Choices []struct {
			Message      struct{ Content string } `json:"message"`
			FinishReason string                   `json:"finish_reason"`
		} `json:"choices"`
		Usage struct {
			CompletionTokens int `json:"completion_tokens"`
		} `json:"usage"`
	}
	if err := json.Unmarshal(body, &cc); err != nil {
		t.Fatalf("decode: %v: %s", err, body)
	}
	if want := sim.ExpectedText(prompt, 12); cc.Choices[0].Message.Content != want {
		t.Fatalf("content %q, want %q", cc.Choices[0].Message.Content, want)
	}
	if cc.Object != "chat.completion" || cc.Usage.CompletionTokens != 12 || cc.Choices[0].FinishReason != "length" {
		t.Fatalf("unexpected answer: %s", body)
	}
}

func TestGeneratedRequestID(t *testing.T) {
	gw, _ := simAndGateway(t, 1, nil)
	resp, _ := post(t, gw.URL+"/v1/chat/completions", chatBody("hi", ""))
	if id := resp.Header.Get("X-Request-Id"); len(id) != 16 {
		t.Fatalf("generated X-Request-Id %q, want 16 hex digits", id)
	}
}

func TestCompletionsEndpoint(t *testing.T) {
	gw, _ := simAndGateway(t, 1, nil)
	resp, body := post(t, gw.URL+"/v1/completions", `{"model":"qwen3-8b","prompt":"Once upon a time","max_tokens":5}`)
	if resp.StatusCode != 200 || !strings.Contains(string(body), `"text_completion"`) {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	if !strings.Contains(string(body), sim.ExpectedText("Once upon a time", 5)) {
		t.Fatalf("completion text missing: %s", body)
	}
}

func TestChatStreaming(t *testing.T) {
	gw, _ := simAndGateway(t, 1, nil)
	prompt := "Tell me a story about a lighthouse"
	resp, body := post(t, gw.URL+"/v1/chat/completions", chatBody(prompt, `"stream":true,"max_tokens":20`))
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("status %d type %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	text, events, done := streamText(t, strings.NewReader(string(body)))
	if text != sim.ExpectedText(prompt, 20) || !done || events < 20 {
		t.Fatalf("stream text %q (%d events, done=%v)", text, events, done)
	}
	if strings.Contains(string(body), `"usage"`) {
		t.Fatalf("usage chunk sent although the client did not ask for it")
	}
}

// The first chunk must reach the client while the node is still generating.
func TestStreamIsNotBuffered(t *testing.T) {
	gw, _ := simAndGateway(t, 1, func(c *sim.Config) {
		c.TTFT, c.ITL, c.OutputTokens = 10*time.Millisecond, 50*time.Millisecond, 20
	})
	start := time.Now()
	req, _ := http.NewRequest(http.MethodPost, gw.URL+"/v1/chat/completions", strings.NewReader(chatBody("stream please", `"stream":true`)))
	req.Header.Set("Content-Type", "application/json")
	resp, err := httpClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	var firstContent time.Duration
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			break
		}
		if firstContent == 0 && strings.Contains(line, `"content":"`) && !strings.Contains(line, `"content":""`) {
			firstContent = time.Since(start)
		}
	}
	total := time.Since(start)
	// 20 tokens at 50ms: the node generates for ~1s. The first token leaves
	// it after ~60ms.
	if firstContent == 0 || firstContent > 400*time.Millisecond || total < 900*time.Millisecond {
		t.Fatalf("first content chunk after %v, stream ended after %v: chunks are being buffered", firstContent, total)
	}
}

func TestOpenAIGoSDK(t *testing.T) {
	gw, _ := simAndGateway(t, 1, nil)
	client := openai.NewClient(option.WithBaseURL(gw.URL+"/v1/"), option.WithAPIKey("sk-test"), option.WithMaxRetries(0))
	ctx := context.Background()
	prompt := "Say hello to the SDK"
	params := openai.ChatCompletionNewParams{
		Model:     "qwen3-8b",
		Messages:  []openai.ChatCompletionMessageParamUnion{openai.SystemMessage("You are terse."), openai.UserMessage(prompt)},
		MaxTokens: openai.Int(8),
	}
	cc, err := client.Chat.Completions.New(ctx, params)
	if err != nil {
		t.Fatalf("non-streaming: %v", err)
	}
	want := sim.ExpectedText("You are terse.\n"+prompt, 8)
	if cc.Choices[0].Message.Content != want || cc.Usage.CompletionTokens != 8 {
		t.Fatalf("non-streaming content %q (usage %+v), want %q", cc.Choices[0].Message.Content, cc.Usage, want)
	}

	params.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
	stream := client.Chat.Completions.NewStreaming(ctx, params)
	acc := openai.ChatCompletionAccumulator{}
	chunks := 0
	for stream.Next() {
		acc.AddChunk(stream.Current())
		chunks++
	}
	if err := stream.Err(); err != nil {
		t.Fatalf("streaming: %v", err)
	}
	if acc.Choices[0].Message.Content != want || chunks < 8 || acc.Usage.CompletionTokens != 8 {
		t.Fatalf("streamed content %q over %d chunks, usage %+v", acc.Choices[0].Message.Content, chunks, acc.Usage)
	}

	models, err := client.Models.List(ctx)
	if err != nil || len(models.Data) == 0 || models.Data[0].ID != "qwen3-8b" {
		t.Fatalf("models: %v %+v", err, models)
	}
}

// When the client goes away mid-stream, the node must see its request end.
func TestClientAbortEndsUpstream(t *testing.T) {
	gw, sims := simAndGateway(t, 1, func(c *sim.Config) {
		c.TTFT, c.ITL, c.OutputTokens = 0, 20*time.Millisecond, 500
	})
	conn, err := net.Dial("tcp", strings.TrimPrefix(gw.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	body := chatBody("a very long answer please", `"stream":true`)
	_, _ = io.WriteString(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: "+
		strconv.Itoa(len(body))+"\r\n\r\n"+body)
	br := bufio.NewReader(conn)
	for i := 0; i < 8; i++ { // headers and a few chunks
		if _, err := br.ReadString('\n'); err != nil {
			t.Fatal(err)
		}
	}
	if st := sims[0].Stats(); st.Running != 1 {
		t.Fatalf("node running %d, want 1", st.Running)
	}
	_ = conn.Close()
	closed := time.Now()
	testenv.Eventually(t, time.Second, func() bool {
		st := sims[0].Stats()
		return st.Running == 0 && st.Cancelled == 1
	}, "node still generating 1s after the client left: %+v", sims[0].Stats())
	t.Logf("node saw the request end %v after the client left", time.Since(closed))
	testenv.Eventually(t, time.Second, func() bool { return gw.Pool().Nodes()[0].Inflight() == 0 },
		"gateway in-flight count leaked: %d", gw.Pool().Nodes()[0].Inflight())
}

func TestRetryOnDifferentNode(t *testing.T) {
	broken := testenv.GPUSim(t, func(c *sim.Config) { c.FailRate = 1 })
	good := testenv.GPUSim(t, nil)
	cfg := testConfig(broken, good)
	gw := startGateway(t, cfg)
	for i := 0; i < 10; i++ {
		resp, body := post(t, gw.URL+"/v1/chat/completions", chatBody("retry me", ""))
		if resp.StatusCode != 200 || resp.Header.Get("X-Upstream") != "gpu-b" {
			t.Fatalf("request %d: status %d upstream %q: %s", i, resp.StatusCode, resp.Header.Get("X-Upstream"), body)
		}
	}
	if good.Stats().Completed != 10 {
		t.Fatalf("good node completed %d, want 10", good.Stats().Completed)
	}
}

func TestUpstreamDownIs502(t *testing.T) {
	s := testenv.GPUSim(t, nil)
	cfg := testConfig(s)
	cfg.Nodes[0].URL = "http://127.0.0.1:" + strconv.Itoa(testenv.FreePort(t)) // nothing listens
	cfg.Nodes[0].HealthURL = s.URL() + "/health"                               // but the probe passes
	gw := startGateway(t, cfg)
	resp, body := post(t, gw.URL+"/v1/chat/completions", chatBody("hello?", ""))
	if resp.StatusCode != 502 || !strings.Contains(string(body), `"upstream_error"`) {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
}

func TestUpstreamTimeoutIs504(t *testing.T) {
	s := testenv.GPUSim(t, func(c *sim.Config) { c.HangRate = 1 })
	cfg := testConfig(s)
	cfg.Timeouts.FirstByte = 200e6
	cfg.Balancer.Retries = 0
	gw := startGateway(t, cfg)
	resp, body := post(t, gw.URL+"/v1/chat/completions", chatBody("hang", `"stream":true`))
	if resp.StatusCode != 504 || !strings.Contains(string(body), "upstream_timeout") {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
}

func TestModelsHealthReady(t *testing.T) {
	gw, _ := simAndGateway(t, 1, nil)
	for path, want := range map[string]string{"/v1/models": `"id":"qwen3-8b"`, "/healthz": `"ok"`, "/readyz": `"ready"`} {
		resp, err := httpClient.Get(gw.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !strings.Contains(string(b), want) {
			t.Fatalf("%s: %d %s", path, resp.StatusCode, b)
		}
	}
}

func TestReadyzWithoutNodes(t *testing.T) {
	s := testenv.GPUSim(t, nil)
	s.SetHealthy(false)
	gw := startGateway(t, testConfig(s))
	gw.Pool().ProbeAll()
	resp, err := httpClient.Get(gw.URL + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 503 {
		t.Fatalf("readyz %d with no healthy node, want 503", resp.StatusCode)
	}
}

func TestMetricsExposition(t *testing.T) {
	gw, _ := simAndGateway(t, 1, nil)
	post(t, gw.URL+"/v1/chat/completions", chatBody("count me", ""))
	resp, err := httpClient.Get(gw.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{`frontdoor_requests_total{endpoint="chat",code="200"} 1`, `frontdoor_node_inflight{node="gpu-a"} 0`, `frontdoor_request_duration_seconds_bucket`} {
		if !strings.Contains(string(b), want) {
			t.Fatalf("metrics lack %q:\n%s", want, b)
		}
	}
}

func TestStatusAndDashboard(t *testing.T) {
	s := testenv.GPUSim(t, nil)
	cfg := testConfig(s)
	cfg.Cache.Backend = "memory"
	gw := startGateway(t, cfg)
	post(t, gw.URL+"/v1/chat/completions", chatBody("status please", ""))
	resp, err := httpClient.Get(gw.URL + "/status")
	if err != nil {
		t.Fatal(err)
	}
	var st admin.Status
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil || resp.StatusCode != 200 {
		t.Fatalf("status: %d %v", resp.StatusCode, err)
	}
	resp.Body.Close()
	if !st.Ready || len(st.Nodes) != 1 || st.Nodes[0].Name != "gpu-a" || st.Nodes[0].State != "healthy" || st.Cache == nil || st.Cache.Results["miss"] != 1 || st.Requests["2xx"] != 1 {
		t.Fatalf("status %+v", st)
	}
	resp, err = httpClient.Get(gw.URL + "/dashboard")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(b), "cache hit rate") || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") {
		t.Fatalf("dashboard: %d %.100s", resp.StatusCode, b)
	}
}

// panicking is a Backend with a bug.
type panicking struct{}

func (panicking) Send(context.Context, *adapters.UpstreamRequest) (*adapters.UpstreamResponse, error) {
	panic("backend bug")
}
func (panicking) MapError(int, []byte) *adapters.APIError { return nil }
func (panicking) Name() string                            { return "panicking" }

// A panic is answered with a 500 and releases every in-flight counter.
func TestPanicReleasesCounters(t *testing.T) {
	s := testenv.GPUSim(t, nil)
	cfg := testConfig(s)
	t.Setenv("TEST_P_KEYS", "sk-p")
	cfg.Tenants = []Tenant{{Name: "p", APIKeysEnv: "TEST_P_KEYS", MaxConcurrency: 2}}
	logs := &syncBuffer{}
	gw, err := New(cfg, Deps{Logger: NewLogger(cfg.Logging, logs), Backends: map[string]adapters.Backend{"gpu-a": panicking{}}})
	if err != nil {
		t.Fatal(err)
	}
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	go func() { _ = gw.Serve(ln) }()
	defer func() { _ = gw.Shutdown(context.Background()) }()
	for i := 0; i < 5; i++ {
		resp, b := post(t, "http://"+ln.Addr().String()+"/v1/chat/completions", chatBody("boom", ""), "Authorization", "Bearer sk-p")
		if resp.StatusCode != 500 || !strings.Contains(string(b), "internal_error") {
			t.Fatalf("request %d: %d %s", i, resp.StatusCode, b)
		}
	}
	if n := gw.Pool().Nodes()[0].Inflight(); n != 0 {
		t.Fatalf("node in-flight leaked: %d", n)
	}
	if n := gw.adm.Inflight("p"); n != 0 {
		t.Fatalf("tenant in-flight leaked: %d", n)
	}
	if !strings.Contains(logs.String(), "handler panicked") {
		t.Fatal("the panic was not logged")
	}
}

// TestPprofIsAdminOnly: the Go profiler is served under /debug/pprof/ only
// to admins (token or allowed address), like /status.
func TestPprofIsAdminOnly(t *testing.T) {
	t.Setenv("TEST_ADMIN_TOKEN", "a8f8e432998d9af0701319da19bf179f744814bc9d3436fa0ac818363e7bdaa4")
	cfg := testConfig(testenv.GPUSim(t, nil))
	cfg.Admin.TokenEnv = "TEST_ADMIN_TOKEN"
	cfg.Admin.AllowCIDRs = nil
	gw := startGateway(t, cfg)
	get := func(path, token string) (int, string) {
		req, _ := http.NewRequest(http.MethodGet, gw.URL+path, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := httpClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, b := get("/debug/pprof/", ""); code != 403 || !strings.Contains(b, "admin_forbidden") {
		t.Fatalf("without token: %d %s", code, b)
	}
	if code, b := get("/debug/pprof/goroutine?debug=1", "a8f8e432998d9af0701319da19bf179f744814bc9d3436fa0ac818363e7bdaa4"); code != 200 || !strings.Contains(b, "goroutine profile") {
		t.Fatalf("with token: %d %.200s", code, b)
	}
}

// TestPipelinedRequests: a client that pipelines a plain request and a
// streamed one on one connection gets both answers, and the stream's first
// event long before its end: a pipelined stream must not be held back.
func TestPipelinedRequests(t *testing.T) {
	gw, _ := simAndGateway(t, 1, func(c *sim.Config) {
		c.TTFT, c.ITL = 10*time.Millisecond, 60*time.Millisecond
	})
	c, err := net.Dial("tcp", strings.TrimPrefix(gw.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	req := func(body string) string {
		return "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: " +
			strconv.Itoa(len(body)) + "\r\n\r\n" + body
	}
	plain := req(chatBody("first", `"max_tokens":2`))
	streamed := req(chatBody("second", `"max_tokens":16,"stream":true`)) // ~1 s of tokens
	start := time.Now()
	if _, err := io.WriteString(c, plain+streamed); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	br := bufio.NewReader(c)
	first, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("first answer: %v", err)
	}
	b, _ := io.ReadAll(first.Body)
	if first.StatusCode != 200 || !strings.Contains(string(b), `"chat.completion"`) {
		t.Fatalf("first answer %d: %s", first.StatusCode, b)
	}
	second, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("second answer: %v", err)
	}
	sr := bufio.NewReader(second.Body)
	if _, err := sr.ReadString('\n'); err != nil {
		t.Fatalf("first event: %v", err)
	}
	firstEvent := time.Since(start)
	_, events, done := streamText(t, sr)
	total := time.Since(start)
	if second.StatusCode != 200 || events == 0 || !done {
		t.Fatalf("streamed answer: status %d, %d events, done %v", second.StatusCode, events, done)
	}
	if firstEvent > total/2 {
		t.Fatalf("the pipelined stream was held back: first event after %s of %s", firstEvent, total)
	}
}

// TestClientTimeout: a client that starts a request and stalls, or keeps
// an idle connection, is cut off after timeouts.client.
func TestClientTimeout(t *testing.T) {
	cfg := testConfig(testenv.GPUSim(t, nil))
	cfg.Timeouts.Client = units.Duration(300 * time.Millisecond)
	gw := startGateway(t, cfg)
	for _, start := range []string{"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n", ""} {
		c, err := net.Dial("tcp", strings.TrimPrefix(gw.URL, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.WriteString(c, start)
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		begin := time.Now()
		_, err = io.ReadAll(c) // whatever the server says, it must close
		took := time.Since(begin)
		c.Close()
		if err != nil || took < 250*time.Millisecond || took > 3*time.Second {
			t.Fatalf("stalled client (%q): closed after %s, err %v", start, took, err)
		}
	}
}
