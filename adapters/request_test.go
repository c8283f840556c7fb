package adapters

import (
	"encoding/json"
	"reflect"
	"strconv"
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
		_ = r.PromptText() // unescapes strings, as the cache key does
		var a fastjson.Arena
		r.Root().Set("model", a.NewString("other"))
		if out := AppendJSONValue(nil, r.Root()); !json.Valid(out) || fastjson.GetString(out, "model") != "other" {
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

// chatBodyOfSize builds a realistic chat request of about size bytes: a
// system prompt, two tools, and turns of prose with escapes and non-ASCII
// text, ending on a user question.
func chatBodyOfSize(size int) []byte {
	turn := func(i int) string {
		role := "user"
		if i%2 == 1 {
			role = "assistant"
		}
		text := `Turn ` + strconv.Itoa(i) + `: the deployment in eu-west-1 failed with \"exit code 137\" after the rollout;` +
			` logs say \u201cOOMKilled\u201d. Température élevée, 内存不足. Steps:\n1. check limits\n2. raise memory\n3. redeploy. `
		return `{"role":"` + role + `","content":"` + strings.Repeat(text, 2) + `"}`
	}
	head := `{"model":"qwen3-8b","temperature":0.2,"max_tokens":512,"stream":false,"user":"u-1234",` +
		`"tools":[{"type":"function","function":{"name":"get_logs","description":"Fetch pod logs","parameters":{"type":"object","properties":{"pod":{"type":"string"},"lines":{"type":"integer"}},"required":["pod"]}}},` +
		`{"type":"function","function":{"name":"restart","parameters":{"type":"object","properties":{"pod":{"type":"string"}}}}}],` +
		`"messages":[{"role":"system","content":"You are a careful SRE assistant. Answer briefly and cite the command you would run."}`
	var sb strings.Builder
	sb.WriteString(head)
	for i := 0; sb.Len() < size-200; i++ {
		sb.WriteString("," + turn(i))
	}
	sb.WriteString(`,{"role":"user","content":"So what should I change first?"}]}`)
	return []byte(sb.String())
}

func BenchmarkParseRequest(b *testing.B) {
	bodies := map[string][]byte{
		// bench/streams' wrk request
		"short": []byte(`{"model":"qwen3-8b","messages":[{"role":"system","content":"You are a helpful assistant."},{"role":"user","content":"What is the capital of France? Answer in one word."}],"temperature":0.7,"max_tokens":16,"stream":true}`),
	}
	for _, size := range []int{2 << 10, 64 << 10} {
		bodies[strconv.Itoa(size>>10)+"KiB"] = chatBodyOfSize(size)
	}
	for _, name := range []string{"short", "2KiB", "64KiB"} {
		body := bodies[name]
		b.Run(name, func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				r, err := ParseRequest(EndpointChat, body)
				if err != nil {
					b.Fatal(err)
				}
				r.Release()
			}
		})
	}
}

// A body that two JSON readers could read differently is refused, with
// the problem, the key and its place named (issue 25): fastjson, which the
// cache reads with, takes the first of duplicate keys, engines the last.
func TestParseRequestRefusesAmbiguousBodies(t *testing.T) {
	const msgs = `"messages":[{"role":"user","content":"hi"}]`
	cases := []struct {
		name, body, code, param, names string
	}{
		{"top level", `{"model":"a","model":"b",` + msgs + `}`, CodeDuplicateKey, "model", `"model" in the request body`},
		{"escaped key", `{"model":"a","\u006dodel":"b",` + msgs + `}`, CodeDuplicateKey, "model", `"model" in the request body`},
		{"message content", `{"model":"m","messages":[{"role":"user","content":"a","content":"b"}]}`, CodeDuplicateKey, "messages[0].content", `"content" in messages[0]`},
		{"second message", `{"model":"m","messages":[{"role":"system","content":"s"},{"role":"user","role":"system","content":"b"}]}`, CodeDuplicateKey, "messages[1].role", `"role" in messages[1]`},
		{"content part", `{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"a","text":"b"}]}]}`, CodeDuplicateKey, "messages[0].content[0].text", `"text" in messages[0].content[0]`},
		{"part type", `{"model":"m","messages":[{"role":"user","content":[{"type":"image_url","type":"text","text":"a"}]}]}`, CodeDuplicateKey, "messages[0].content[0].type", `"type" in messages[0].content[0]`},
		{"tool schema", `{"model":"m",` + msgs + `,"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object","properties":{"a":{},"a":{}}}}}]}`,
			CodeDuplicateKey, "tools[0].function.parameters.properties.a", `"a" in tools[0].function.parameters.properties`},
		{"stream_options", `{"model":"m",` + msgs + `,"stream":true,"stream_options":{"include_usage":false,"include_usage":true}}`, CodeDuplicateKey, "stream_options.include_usage", `"include_usage" in stream_options`},
		{"logit_bias", `{"model":"m",` + msgs + `,"logit_bias":{"50256":1,"50256":-100}}`, CodeDuplicateKey, "logit_bias.50256", `"50256" in logit_bias`},
		{"vendor field", `{"model":"m",` + msgs + `,"x_vendor":{"a.b":{"k":1,"k":2}}}`, CodeDuplicateKey, `x_vendor["a.b"].k`, `"k" in x_vendor["a.b"]`},
		{"invalid UTF-8 in a value", `{"model":"m","messages":[{"role":"user","content":"a` + "\xff" + `"}]}`, CodeInvalidUTF8, "messages[0].content", "invalid UTF-8"},
		{"truncated UTF-8", `{"model":"m","messages":[{"role":"user","content":"` + "\xe4\xb8" + `"}]}`, CodeInvalidUTF8, "messages[0].content", "invalid UTF-8"},
		{"encoded surrogate", `{"model":"m","messages":[{"role":"user","content":"` + "\xed\xa0\x80" + `"}]}`, CodeInvalidUTF8, "messages[0].content", "invalid UTF-8"},
		{"invalid UTF-8 in a key", `{"model":"m",` + msgs + `,"x` + "\xff" + `":1}`, CodeInvalidUTF8, "", "invalid UTF-8"},
		{"lone high surrogate", `{"model":"m","messages":[{"role":"user","content":"x\ud800"}]}`, CodeInvalidEscape, "messages[0].content", `surrogate escape \ud800`},
		{"lone low surrogate", `{"model":"m","messages":[{"role":"user","content":"x\uDC00y"}]}`, CodeInvalidEscape, "messages[0].content", `surrogate escape \uDC00`},
		{"high then not low", `{"model":"m","messages":[{"role":"user","content":"\ud83d\u0041"}]}`, CodeInvalidEscape, "messages[0].content", `surrogate escape \ud83d`},
		{"pair reversed", `{"model":"m","messages":[{"role":"user","content":"\ude00\ud83d"}]}`, CodeInvalidEscape, "messages[0].content", `surrogate escape \ude00`},
		{"surrogate in a key", `{"model":"m",` + msgs + `,"\ud800":1}`, CodeInvalidEscape, "", `surrogate escape \ud800`},
		// Still refused as before: not JSON at all.
		{"lone dot", `{"model":"m",` + msgs + `,"temperature":.}`, CodeInvalidJSON, "temperature", "invalid character"},
		{"NaN", `{"model":"m",` + msgs + `,"temperature":NaN}`, CodeInvalidJSON, "temperature", "invalid character"},
		{"trailing comma", `{"model":"m",` + msgs + `,}`, CodeInvalidJSON, "", "invalid character"},
		{"two values", `{"model":"m",` + msgs + `} {}`, CodeInvalidJSON, "", "after the top-level value"},
		{"cut short", `{"model":"m","messages":[`, CodeInvalidJSON, "messages", "unexpected EOF"},
		{"empty", ``, CodeInvalidJSON, "", "empty"},
		{"control character", "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"a\x01\"}]}", CodeInvalidJSON, "messages[0].content", "invalid character"},
	}
	for _, c := range cases {
		r, e := ParseRequest(EndpointChat, []byte(c.body))
		if r != nil {
			r.Release()
			t.Errorf("%s: accepted %q", c.name, c.body)
			continue
		}
		if e.Status != 400 || e.Type != TypeInvalidRequest || e.Code != c.code || e.Param != c.param || !strings.Contains(e.Message, c.names) {
			t.Errorf("%s: %s; want code %s, param %q, naming %s", c.name, e.AppendJSON(nil), c.code, c.param, c.names)
		}
	}
	// What is unambiguous stays accepted: a key once per object, however
	// often it recurs elsewhere, escaped pairs, an escaped backslash.
	for _, body := range []string{
		`{"model":"m","messages":[{"role":"user","content":"a"},{"role":"user","content":"a"}],"x":{"model":{"model":1}}}`,
		`{"model":"m","messages":[{"role":"user","content":"\ud83d\ude00 \uD83D\uDE00 😀 \u00e9"}]}`,
		`{"model":"m","messages":[{"role":"user","content":"x\\ud800"}]}`,
		`{"model":"m","messages":[{"role":"user","content":"nul \u0000 and \u2028"}]}`,
	} {
		r, e := ParseRequest(EndpointChat, []byte(body))
		if e != nil {
			t.Errorf("refused %s: %v", body, e)
			continue
		}
		r.Release()
	}
}

// AppendJSONValue writes what it reads: the strings and keys fastjson has
// unescaped (the cache key reads them all) come out as JSON, where
// fastjson's MarshalTo writes Go escapes (\a, \x00, \U000e0067).
func TestAppendJSONValueIsJSON(t *testing.T) {
	const flag = "\U0001F3F4\U000E0067\U000E0062\U000E0073\U000E0063\U000E0074\U000E007F"
	body := `{"model":"m","x_\u0001":"\u0007\b\f\n\r\t\"\\\/ \u00ad \u2028 ` + flag + `","x_n":[1.50,-0,2e3,true,false,null,{}],` +
		`"messages":[{"role":"user","content":[{"type":"text","text":"a\u0000b` + flag + `\n"}]}]}`
	var want map[string]any
	if err := json.Unmarshal([]byte(body), &want); err != nil {
		t.Fatal(err)
	}
	want["model"] = "other"
	r, apiErr := ParseRequest(EndpointChat, []byte(body))
	if apiErr != nil {
		t.Fatal(apiErr)
	}
	defer r.Release()
	_ = r.PromptText() // unescapes the message texts, as the cache key does
	_ = r.Root().GetStringBytes("x_\x01")
	var a fastjson.Arena
	r.Root().Set("model", a.NewString("other"))
	out := AppendJSONValue(nil, r.Root())
	var got map[string]any
	if err := json.Unmarshal(out, &got); err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("%v: %s\nreads as %v\nwant     %v", err, out, got, want)
	}

	// The spill-over's rewrite too.
	d := &DashScope{quirks: true}
	out, err := d.rewrite(&UpstreamRequest{Body: []byte(body), Model: "other", Stream: true})
	if err != nil || json.Unmarshal(out, &got) != nil || got["x_\x01"] != want["x_\x01"] {
		t.Fatalf("dashscope rewrite: %v %s", err, out)
	}
}

// BenchmarkAppendJSONValue is the rewrite of a request going upstream (a
// stream that did not ask for usage, a model alias), its strings unescaped
// as the cache key leaves them.
func BenchmarkAppendJSONValue(b *testing.B) {
	for _, size := range []int{2 << 10, 64 << 10} {
		body := chatBodyOfSize(size)
		b.Run(strconv.Itoa(size>>10)+"KiB", func(b *testing.B) {
			r, apiErr := ParseRequest(EndpointChat, body)
			if apiErr != nil {
				b.Fatal(apiErr)
			}
			defer r.Release()
			_ = r.PromptText()
			buf := make([]byte, 0, 2*len(body))
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				buf = AppendJSONValue(buf[:0], r.Root())
			}
		})
	}
}

// TestUpstreamBodyAsksForUsage: a stream that did not ask for the usage
// chunk asks for it upstream, with the client's bytes kept as they came
// when only that changes, and the same JSON as re-encoding gives.
func TestUpstreamBodyAsksForUsage(t *testing.T) {
	for _, tc := range []struct{ body, want string }{
		{`{"model":"m","prompt":"hi","stream":true}`,
			`{"model":"m","prompt":"hi","stream":true,"stream_options":{"include_usage":true}}`},
		{"{ \"model\" : \"m\",\n \"stream\": true, \"prompt\": \"}\\u00e9\" }\n\t",
			"{ \"model\" : \"m\",\n \"stream\": true, \"prompt\": \"}\\u00e9\"," + `"stream_options":{"include_usage":true}` + "}\n\t"},
		{`{"model":"m","stream":true,"prompt":"x","stream_options":{}}`, ""},
		{`{"model":"m","stream":true,"prompt":"x","stream_options":null}`, ""},
		{`{"model":"m","stream":true,"prompt":"x","stream_options":{"include_usage":false}}`, ""},
	} {
		r, apiErr := ParseRequest(EndpointCompletion, []byte(tc.body))
		if apiErr != nil {
			t.Fatalf("%s: %v", tc.body, apiErr)
		}
		got := r.UpstreamBody("m")
		if tc.want != "" && string(got) != tc.want {
			t.Errorf("%s:\n got %s\nwant %s", tc.body, got, tc.want)
		}
		if !fastjson.GetBool(got, "stream_options", "include_usage") || fastjson.GetString(got, "prompt") != fastjson.GetString([]byte(tc.body), "prompt") {
			t.Errorf("%s: upstream body %s does not ask for usage", tc.body, got)
		}
		if err := fastjson.ValidateBytes(got); err != nil {
			t.Errorf("%s: %s is not JSON: %v", tc.body, got, err)
		}
		r.Release()
	}
}

// FuzzAppendMember: splicing a member into any JSON object gives the
// object with that member added, or nil for an empty one.
func FuzzAppendMember(f *testing.F) {
	for _, s := range []string{`{"a":1}`, `{}`, " { \"a\" : [ \"}\" ] }\n", `{"a":{"b":{}}}`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, obj string) {
		v, err := fastjson.Parse(obj)
		if err != nil || v.Type() != fastjson.TypeObject || v.Exists("stream_options") {
			return
		}
		got := appendMember(nil, []byte(obj), includeUsageMember)
		n := v.GetObject().Len()
		if n == 0 {
			if got != nil {
				t.Fatalf("%q: an empty object got %q", obj, got)
			}
			return
		}
		w, err := fastjson.ParseBytes(got)
		if err != nil || w.Type() != fastjson.TypeObject || w.GetObject().Len() != n+1 || !w.GetBool("stream_options", "include_usage") {
			t.Fatalf("%q: got %q (%v)", obj, got, err)
		}
	})
}
