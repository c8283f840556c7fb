package adapters

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/valyala/fastjson"
)

func TestParseRequestExtractsFields(t *testing.T) {
	body := `{"model":"m","stream":true,"stream_options":{"include_usage":true},"temperature":0.5,
		"max_completion_tokens":30,"max_tokens":50,"n":1,"x_vendor":{"keep":"me"},
		"tools":[{"type":"function","function":{"name":"f"}}],
		"messages":[{"role":"system","content":"s"},{"role":"user","content":[{"type":"text","text":"a"},{"type":"image_url","image_url":{"url":"u"}}]},
		{"role":"assistant","content":null,"tool_calls":[{"id":"1","type":"function","function":{"name":"f","arguments":"{}"}}]},
		{"role":"tool","tool_call_id":"1","content":"r"}]}`
	r, apiErr := ParseRequest(EndpointChat, []byte(body))
	if apiErr != nil {
		t.Fatalf("valid request refused: %v", apiErr)
	}
	defer r.Release()
	if r.Model != "m" || !r.Stream || !r.IncludeUsage || r.Temperature != 0.5 || !r.HasTemperature ||
		r.MaxTokens != 30 || !r.Multimodal || !r.HasTools || r.N != 1 {
		t.Fatalf("fields: %+v", r)
	}
	if string(r.Body) != body {
		t.Fatal("body must be kept byte for byte, unknown fields included")
	}
	if v := r.Root().GetStringBytes("x_vendor", "keep"); string(v) != "me" {
		t.Fatal("unknown field lost")
	}
}

func TestParseRequestCompletionPrompts(t *testing.T) {
	for _, p := range []string{`"hi"`, `["a","b"]`, `[1,2,3]`, `[[1,2],[3]]`} {
		r, err := ParseRequest(EndpointCompletion, []byte(`{"model":"m","prompt":`+p+`}`))
		if err != nil {
			t.Fatalf("prompt %s refused: %v", p, err)
		}
		r.Release()
	}
	for _, p := range []string{`[]`, `{}`, `[{"a":1}]`, `[["x"]]`} {
		if _, err := ParseRequest(EndpointCompletion, []byte(`{"model":"m","prompt":`+p+`}`)); err == nil {
			t.Fatalf("prompt %s accepted", p)
		}
	}
}

func TestAPIErrorJSON(t *testing.T) {
	e := &APIError{Status: 400, Message: `bad "x"` + "\n", Type: TypeInvalidRequest, Param: "x"}
	var env map[string]map[string]any
	if err := json.Unmarshal(e.AppendJSON(nil), &env); err != nil {
		t.Fatalf("invalid JSON: %v", err)
	}
	if env["error"]["message"] != e.Message || env["error"]["param"] != "x" || env["error"]["code"] != nil {
		t.Fatalf("envelope: %v", env)
	}
}

func TestMapUpstreamError(t *testing.T) {
	cases := []struct {
		kind   Kind
		status int
		body   string
		want   int
		typ    string
	}{
		{KindTGI, 429, `{"error":"Model is overloaded","error_type":"overloaded"}`, 429, TypeRateLimit},
		{KindVLLM, 400, `{"object":"error","message":"too long","type":"BadRequestError","code":400}`, 400, TypeInvalidRequest},
		{KindDashScope, 429, `{"error":{"code":"Throttling.RateQuota","message":"slow down","type":"Throttling.RateQuota"}}`, 429, TypeRateLimit},
		{KindDashScope, 400, `{"error":{"code":"invalid_parameter_error","message":"bad","type":"invalid_request_error"}}`, 400, TypeInvalidRequest},
		{KindDashScope, 401, `{"error":{"code":"invalid_api_key","message":"Incorrect API key provided: sk-secret"}}`, 502, TypeUpstream},
		{KindVLLM, 500, `engine died`, 502, TypeUpstream},
	}
	for _, c := range cases {
		e := MapUpstreamError(c.kind, "n1", c.status, []byte(c.body))
		if e.Status != c.want || e.Type != c.typ {
			t.Fatalf("%s %d %s: got %d %s", c.kind, c.status, c.body, e.Status, e.Type)
		}
		if c.status == 401 && (strings.Contains(e.Message, "sk-secret") || strings.Contains(string(e.AppendJSON(nil)), "sk-secret")) {
			t.Fatal("an upstream auth error must not echo the key")
		}
	}
}

// FuzzParseRequest checks that no input panics the parser, that accepted
// requests satisfy the invariants the gateway relies on, and that errors
// always make a valid envelope.
func FuzzParseRequest(f *testing.F) {
	f.Add([]byte(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`), false)
	f.Add([]byte(`{"model":"m","prompt":"hi","max_tokens":3}`), true)
	f.Fuzz(func(t *testing.T, body []byte, completion bool) {
		ep := EndpointChat
		if completion {
			ep = EndpointCompletion
		}
		r, apiErr := ParseRequest(ep, body)
		if apiErr != nil {
			if apiErr.Status < 400 || apiErr.Status > 499 || apiErr.Message == "" {
				t.Fatalf("bad error %+v", apiErr)
			}
			if !json.Valid(apiErr.AppendJSON(nil)) {
				t.Fatalf("invalid error JSON for %q", apiErr.Message)
			}
			return
		}
		defer r.Release()
		if r.Model == "" || r.N < 1 || r.MaxTokens < 0 || (r.HasTemperature && (r.Temperature < 0 || r.Temperature > 2)) {
			t.Fatalf("accepted request breaks invariants: %+v", r)
		}
		if err := fastjson.ValidateBytes(r.Body); err != nil {
			t.Fatalf("accepted body is not JSON: %v", err)
		}
		var a fastjson.Arena
		r.Root().Set("model", a.NewString("other"))
		if out := r.Root().MarshalTo(nil); fastjson.GetString(out, "model") != "other" {
			t.Fatalf("model rewrite failed: %s", out)
		}
	})
}

func TestAppendJSONString(t *testing.T) {
	for _, s := range []string{"plain", "q\"b\\s", "\a\x00\x1f\n\t", "中文 ok", "bad \xff\xfe utf8", "\u2028"} {
		out := AppendJSONString(nil, s)
		var back string
		if err := json.Unmarshal(out, &back); err != nil {
			t.Fatalf("%q -> %s: %v", s, out, err)
		}
		if utf8.ValidString(s) && back != s {
			t.Fatalf("round trip %q -> %q", s, back)
		}
	}
}
