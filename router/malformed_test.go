package router

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
)

// Every malformed request gets the right 4xx and the OpenAI error envelope,
// and never reaches a node.
func TestMalformedRequests(t *testing.T) {
	gw, sims := simAndGateway(t, 1, nil)
	user := `"messages":[{"role":"user","content":"hi"}]`
	big := `{"model":"qwen3-8b","messages":[{"role":"user","content":"` + strings.Repeat("a", 9<<20) + `"}]}`
	cases := []struct {
		name, method, path, ctype, body string
		status                          int
		param                           string
	}{
		{"bad json", "POST", "/v1/chat/completions", "", `{"model":`, 400, ""},
		{"empty body", "POST", "/v1/chat/completions", "", ``, 400, ""},
		{"not an object", "POST", "/v1/chat/completions", "", `[1,2]`, 400, ""},
		{"missing model", "POST", "/v1/chat/completions", "", `{` + user + `}`, 400, "model"},
		{"model not a string", "POST", "/v1/chat/completions", "", `{"model":7,` + user + `}`, 400, "model"},
		{"missing messages", "POST", "/v1/chat/completions", "", `{"model":"qwen3-8b"}`, 400, "messages"},
		{"empty messages", "POST", "/v1/chat/completions", "", `{"model":"qwen3-8b","messages":[]}`, 400, "messages"},
		{"messages not array", "POST", "/v1/chat/completions", "", `{"model":"qwen3-8b","messages":"hi"}`, 400, "messages"},
		{"message not object", "POST", "/v1/chat/completions", "", `{"model":"qwen3-8b","messages":["hi"]}`, 400, "messages[0]"},
		{"unknown role", "POST", "/v1/chat/completions", "", `{"model":"qwen3-8b","messages":[{"role":"wizard","content":"hi"}]}`, 400, "messages[0].role"},
		{"content wrong type", "POST", "/v1/chat/completions", "", `{"model":"qwen3-8b","messages":[{"role":"user","content":42}]}`, 400, "messages[0].content"},
		{"user without content", "POST", "/v1/chat/completions", "", `{"model":"qwen3-8b","messages":[{"role":"user"}]}`, 400, "messages[0].content"},
		{"unknown content part", "POST", "/v1/chat/completions", "", `{"model":"qwen3-8b","messages":[{"role":"user","content":[{"type":"hologram"}]}]}`, 400, "messages[0].content[0].type"},
		{"tool without tool_call_id", "POST", "/v1/chat/completions", "", `{"model":"qwen3-8b","messages":[{"role":"tool","content":"42"}]}`, 400, "messages[0].tool_call_id"},
		{"negative max_tokens", "POST", "/v1/chat/completions", "", `{"model":"qwen3-8b",` + user + `,"max_tokens":-5}`, 400, "max_tokens"},
		{"fractional max_tokens", "POST", "/v1/chat/completions", "", `{"model":"qwen3-8b",` + user + `,"max_tokens":1.5}`, 400, "max_tokens"},
		{"temperature too high", "POST", "/v1/chat/completions", "", `{"model":"qwen3-8b",` + user + `,"temperature":3}`, 400, "temperature"},
		{"temperature a string", "POST", "/v1/chat/completions", "", `{"model":"qwen3-8b",` + user + `,"temperature":"hot"}`, 400, "temperature"},
		{"top_p above 1", "POST", "/v1/chat/completions", "", `{"model":"qwen3-8b",` + user + `,"top_p":1.5}`, 400, "top_p"},
		{"n zero", "POST", "/v1/chat/completions", "", `{"model":"qwen3-8b",` + user + `,"n":0}`, 400, "n"},
		{"stream not bool", "POST", "/v1/chat/completions", "", `{"model":"qwen3-8b",` + user + `,"stream":"yes"}`, 400, "stream"},
		{"stop a number", "POST", "/v1/chat/completions", "", `{"model":"qwen3-8b",` + user + `,"stop":5}`, 400, "stop"},
		{"tools not array", "POST", "/v1/chat/completions", "", `{"model":"qwen3-8b",` + user + `,"tools":{}}`, 400, "tools"},
		{"tool without name", "POST", "/v1/chat/completions", "", `{"model":"qwen3-8b",` + user + `,"tools":[{"type":"function","function":{}}]}`, 400, "tools[0].function.name"},
		{"bad response_format", "POST", "/v1/chat/completions", "", `{"model":"qwen3-8b",` + user + `,"response_format":{"type":"yaml"}}`, 400, "response_format.type"},
		{"completion without prompt", "POST", "/v1/completions", "", `{"model":"qwen3-8b"}`, 400, "prompt"},
		{"unknown model", "POST", "/v1/chat/completions", "", `{"model":"gpt-9",` + user + `}`, 404, "model"},
		{"unknown path", "POST", "/v1/embeddingz", "", `{}`, 404, ""},
		{"wrong method", "GET", "/v1/chat/completions", "", ``, 405, ""},
		{"wrong content type", "POST", "/v1/chat/completions", "text/plain", `{"model":"qwen3-8b",` + user + `}`, 415, ""},
		{"oversize body", "POST", "/v1/chat/completions", "", big, 413, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			req, _ := http.NewRequest(c.method, gw.URL+c.path, strings.NewReader(c.body))
			ct := c.ctype
			if ct == "" {
				ct = "application/json"
			}
			req.Header.Set("Content-Type", ct)
			resp, err := httpClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != c.status {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, c.status, b)
			}
			var env struct {
				Error *struct {
					Message string  `json:"message"`
					Type    string  `json:"type"`
					Param   *string `json:"param"`
					Code    *string `json:"code"`
				} `json:"error"`
			}
			if err := json.Unmarshal(b, &env); err != nil || env.Error == nil || env.Error.Message == "" || env.Error.Type == "" {
				t.Fatalf("not an OpenAI error envelope: %s", b)
			}
			if c.param != "" && (env.Error.Param == nil || *env.Error.Param != c.param) {
				t.Fatalf("param %v, want %q: %s", env.Error.Param, c.param, b)
			}
			if !strings.Contains(string(b), `"param":`) || !strings.Contains(string(b), `"code":`) {
				t.Fatalf("envelope must carry param and code keys: %s", b)
			}
		})
	}
	if got := sims[0].Stats().Received; got != 0 {
		t.Fatalf("malformed requests reached the node %d times", got)
	}
}
