package adapters_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"frontdoor/adapters"
	"frontdoor/internal/gpusim"
	"frontdoor/internal/testenv"
)

func send(t *testing.T, be adapters.Backend, body string, stream bool, model string) (*adapters.UpstreamResponse, string) {
	t.Helper()
	resp, err := be.Send(context.Background(), &adapters.UpstreamRequest{Endpoint: adapters.EndpointChat, Body: []byte(body), Stream: stream, RequestID: "r1", Model: model})
	if err != nil {
		t.Fatalf("send: %v", err)
	}
	if !resp.Streaming() {
		return resp, string(resp.Body)
	}
	var sb strings.Builder
	for {
		ev, err := resp.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("next: %v", err)
		}
		sb.Write(ev.Raw)
	}
	return resp, sb.String()
}

func cfg() adapters.Config {
	c := adapters.DefaultConfig()
	c.FirstByte, c.Idle = 2*time.Second, 2*time.Second
	return c
}

func TestHTTPBackendAgainstVLLMAndTGI(t *testing.T) {
	for _, kind := range []gpusim.Kind{gpusim.KindVLLM, gpusim.KindTGI, gpusim.KindSGLang} {
		t.Run(string(kind), func(t *testing.T) {
			t.Setenv("NODE_KEY", "sk-node-secret")
			s := testenv.GPUSim(t, func(c *gpusim.Config) { c.Kind, c.APIKey, c.MaxNumSeqs, c.MaxWaiting = kind, "sk-node-secret", 1, 1 })
			be, err := adapters.NewHTTPBackend(adapters.Target{Name: "n1", URL: s.URL(), Kind: adapters.Kind(kind), APIKey: "sk-node-secret"}, cfg())
			if err != nil {
				t.Fatal(err)
			}
			body := `{"model":"qwen3-8b","max_tokens":5,"messages":[{"role":"user","content":"hello"}]}`
			resp, out := send(t, be, body, false, "qwen3-8b")
			resp.Close()
			want := gpusim.ExpectedText("hello", 5)
			if resp.Status != 200 || !strings.Contains(out, want) {
				t.Fatalf("non-streaming: %d %s", resp.Status, out)
			}
			resp, out = send(t, be, strings.Replace(body, `"max_tokens":5`, `"max_tokens":5,"stream":true`, 1), true, "qwen3-8b")
			resp.Close()
			if !strings.Contains(out, "data: [DONE]") || strings.Count(out, "data: ") < 6 {
				t.Fatalf("streaming: %s", out)
			}
			if got := s.Requests()[0].Authorization; got != "Bearer sk-node-secret" {
				t.Fatalf("node key not sent: %q", got)
			}
			// The engine's error bodies map to OpenAI's envelope.
			e := be.MapError(404, []byte(`{"object":"error","message":"The model x does not exist.","type":"NotFoundError","code":404}`))
			if e.Status != 404 || !strings.Contains(e.Message, "does not exist") {
				t.Fatalf("mapped %+v", e)
			}
		})
	}
}

func TestTGIOverloadedIsRetryable429(t *testing.T) {
	s := testenv.GPUSim(t, func(c *gpusim.Config) {
		c.Kind, c.MaxNumSeqs, c.MaxWaiting, c.ITL, c.OutputTokens = gpusim.KindTGI, 1, 1, 50*time.Millisecond, 20
	})
	be, _ := adapters.NewHTTPBackend(adapters.Target{Name: "tgi", URL: s.URL(), Kind: adapters.KindTGI}, cfg())
	body := `{"model":"qwen3-8b","stream":true,"messages":[{"role":"user","content":"slow"}]}`
	held := make(chan *adapters.UpstreamResponse, 2)
	for i := 0; i < 2; i++ { // one running, one waiting
		go func() {
			r, err := be.Send(context.Background(), &adapters.UpstreamRequest{Endpoint: adapters.EndpointChat, Body: []byte(body), Stream: true})
			if err == nil {
				held <- r
			} else {
				held <- nil
			}
		}()
	}
	testenv.Eventually(t, 2*time.Second, func() bool { st := s.Stats(); return st.Running == 1 && st.Waiting == 1 }, "queue not full: %+v", s.Stats())
	defer func() {
		for i := 0; i < 2; i++ {
			if r := <-held; r != nil {
				r.Close()
			}
		}
	}()
	r, err := be.Send(context.Background(), &adapters.UpstreamRequest{Endpoint: adapters.EndpointChat, Body: []byte(body), Stream: true})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if r.Status != 429 || !adapters.RetryableStatus(r.Status) {
		t.Fatalf("overloaded TGI: %d %s", r.Status, r.Body)
	}
	if e := be.MapError(r.Status, r.Body); e.Status != 429 || e.Type != adapters.TypeRateLimit || e.Code != "overloaded" {
		t.Fatalf("mapped %+v", e)
	}
}

func TestDashScopeBackend(t *testing.T) {
	s := testenv.GPUSim(t, func(c *gpusim.Config) {
		c.Kind, c.APIKey, c.Models = gpusim.KindDashScope, "sk-dash", []string{"qwen-plus"}
	})
	be, err := adapters.NewDashScope(adapters.Target{Name: "spillover:dashscope", URL: s.URL() + "/compatible-mode/v1", APIKey: "sk-dash"},
		cfg(), map[string]string{"qwen3-8b": "qwen-plus"})
	if err != nil {
		t.Fatal(err)
	}
	// Non-streaming: enable_thinking:false is added, the model is mapped, and
	// the answer shows the model the client asked for.
	resp, out := send(t, be, `{"model":"qwen3-8b","messages":[{"role":"user","content":"hi"}]}`, false, "qwen3-8b")
	resp.Close()
	if resp.Status != 200 || !strings.Contains(out, `"model":"qwen3-8b"`) || resp.Model != "qwen-plus" {
		t.Fatalf("non-streaming: %d model %q %s", resp.Status, resp.Model, out)
	}
	rec := s.Requests()
	var sent map[string]any
	_ = json.Unmarshal(rec[len(rec)-1].Body, &sent)
	if sent["model"] != "qwen-plus" || sent["enable_thinking"] != false || rec[len(rec)-1].Authorization != "Bearer sk-dash" {
		t.Fatalf("sent %v auth %q", sent, rec[len(rec)-1].Authorization)
	}
	// A client's explicit value is respected: DashScope rejects it, mapped to 400.
	resp, out = send(t, be, `{"model":"qwen3-8b","enable_thinking":true,"messages":[{"role":"user","content":"hi"}]}`, false, "qwen3-8b")
	e := be.MapError(resp.Status, resp.Body)
	resp.Close()
	if resp.Status != 400 || e.Status != 400 || !strings.Contains(e.Message, "enable_thinking") {
		t.Fatalf("explicit enable_thinking: %d %s", resp.Status, out)
	}
	// Streaming: not forced, reasoning passed through, usage requested.
	resp, out = send(t, be, `{"model":"qwen3-8b","stream":true,"messages":[{"role":"user","content":"hi"}]}`, true, "qwen3-8b")
	resp.Close()
	rec = s.Requests()
	sent = nil
	_ = json.Unmarshal(rec[len(rec)-1].Body, &sent)
	if _, forced := sent["enable_thinking"]; forced || !strings.Contains(string(rec[len(rec)-1].Body), `"include_usage":true`) {
		t.Fatalf("streaming request sent as %s", rec[len(rec)-1].Body)
	}
	if !strings.Contains(out, "reasoning_content") || !strings.Contains(out, `"usage"`) || strings.Contains(out, `"model":"qwen-plus"`) {
		t.Fatalf("stream: %s", out)
	}
	// A wrong key is a 502 for our client, and never echoes a key.
	bad, _ := adapters.NewDashScope(adapters.Target{Name: "spillover:dashscope", URL: s.URL() + "/compatible-mode/v1", APIKey: "sk-wrong-key"}, cfg(), nil)
	resp, _ = send(t, bad, `{"model":"qwen-plus","enable_thinking":false,"messages":[{"role":"user","content":"hi"}]}`, false, "qwen-plus")
	e = bad.MapError(resp.Status, resp.Body) // Body is valid until Close
	resp.Close()
	if resp.Status != 401 || e.Status != 502 || strings.Contains(string(e.AppendJSON(nil)), "sk-wrong-key") {
		t.Fatalf("bad key: %d -> %+v", resp.Status, e)
	}
}

func TestDashScopeThrottlingIs429(t *testing.T) {
	s := testenv.GPUSim(t, func(c *gpusim.Config) { c.Kind, c.Models, c.RPM = gpusim.KindDashScope, []string{"qwen-plus"}, 1 })
	be, _ := adapters.NewDashScope(adapters.Target{Name: "d", URL: s.URL() + "/compatible-mode/v1"}, cfg(), nil)
	body := `{"model":"qwen-plus","messages":[{"role":"user","content":"hi"}]}`
	r1, _ := send(t, be, body, false, "qwen-plus")
	r1.Close()
	r2, _ := send(t, be, body, false, "qwen-plus")
	defer r2.Close()
	if e := be.MapError(r2.Status, r2.Body); r2.Status != 429 || e.Status != 429 || e.Code != "Throttling.RateQuota" {
		t.Fatalf("throttled: %d %+v", r2.Status, e)
	}
}

func TestBaseURL(t *testing.T) {
	for in, want := range map[string]string{
		"http://h:9001":                          "/v1",
		"http://h:9001/":                         "/v1",
		"https://x.com/compatible-mode/v1":       "/compatible-mode/v1",
		"http://h/api/v2":                        "/api/v2",
		"http://h/openai":                        "/openai/v1",
		"https://dashscope-intl.aliyuncs.com/x/": "/x/v1",
	} {
		u, err := adapters.BaseURL(in)
		if err != nil || u.Path != want {
			t.Fatalf("%s: %v %v, want %s", in, u, err, want)
		}
	}
	if _, err := adapters.BaseURL("127.0.0.1:9001"); err == nil {
		t.Fatal("a URL without scheme must be refused")
	}
}

// TestHTTPBackendOverTLS: an https upstream (DashScope is one) answers
// plain and streamed requests, several times over pooled connections; the
// TLS handshake and every request run over the deferred-write connection.
func TestHTTPBackendOverTLS(t *testing.T) {
	var requests atomic.Int32
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		body, _ := io.ReadAll(r.Body)
		if r.URL.Path != "/v1/chat/completions" || r.Header.Get("X-Request-Id") != "r1" {
			http.Error(w, "bad request line or id", 400)
			return
		}
		if strings.Contains(string(body), `"stream":true`) {
			w.Header().Set("Content-Type", "text/event-stream")
			for _, tok := range []string{"he", "llo"} {
				fmt.Fprintf(w, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":%q}}]}\n\n", tok)
				w.(http.Flusher).Flush()
			}
			fmt.Fprint(w, "data: [DONE]\n\n")
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"hello"}}]}`)
	}))
	defer srv.Close()
	pool := x509.NewCertPool()
	pool.AddCert(srv.Certificate())
	c := cfg()
	c.TLS = &tls.Config{RootCAs: pool}
	be, err := adapters.NewHTTPBackend(adapters.Target{Name: "tls", URL: srv.URL, Kind: adapters.KindOpenAI}, c)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 5; i++ {
		resp, body := send(t, be, `{"model":"m","messages":[{"role":"user","content":"hi"}]}`, false, "m")
		if resp.Status != 200 || !strings.Contains(body, `"content":"hello"`) {
			t.Fatalf("plain %d: %d %s", i, resp.Status, body)
		}
		resp.Close()
		resp, body = send(t, be, `{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`, true, "m")
		if resp.Status != 200 || !strings.Contains(body, `"he"`) || !strings.Contains(body, `"llo"`) {
			t.Fatalf("stream %d: %d %s", i, resp.Status, body)
		}
		resp.Close()
	}
	if n := requests.Load(); n != 10 {
		t.Fatalf("server saw %d requests, want 10", n)
	}
}
