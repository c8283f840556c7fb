package adapters

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"reflect"
	"strings"
	"testing"
)

func replay(t *testing.T, ep Endpoint, a *Answer, includeUsage bool) (*Answer, int) {
	t.Helper()
	var stream bytes.Buffer
	for _, ev := range StreamEvents(ep, "id-1", 1700000000, a, 2, includeUsage) {
		stream.Write(ev)
	}
	asm := NewAssembler(ep)
	sr := NewSSEReader(&stream)
	events, usageEvents := 0, 0
	for {
		ev, err := sr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if asm.Add(&ev) {
			usageEvents++
		}
		if ev.IsDone() {
			continue
		}
		if !json.Valid(ev.Data) {
			t.Fatalf("invalid chunk JSON: %s", ev.Data)
		}
		events++
	}
	got, err := asm.Answer()
	if err != nil {
		t.Fatalf("assemble: %v", err)
	}
	if includeUsage != (usageEvents == 1) {
		t.Fatalf("usage chunks %d with includeUsage=%v", usageEvents, includeUsage)
	}
	return got, events
}

func TestAnswerRoundTrips(t *testing.T) {
	calls := json.RawMessage(`[{"id":"call_1","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Paris\"}"}}]`)
	for _, a := range []*Answer{
		{Model: "m", Content: "Paris is the capital of France.", Finish: "stop", Usage: Usage{PromptTokens: 5, CompletionTokens: 7, TotalTokens: 12}},
		{Model: "m", Content: "巴黎是法国的首都。", Reasoning: "用户问首都", Finish: "stop", Usage: Usage{1, 2, 3, 1}},
		{Model: "m", ToolCalls: calls, Finish: "tool_calls", Usage: Usage{1, 2, 3, 0}},
		{Model: "m", Content: "line one\nline \"two\"\t", Finish: "length", Usage: Usage{1, 2, 3, 0}},
	} {
		got, events := replay(t, EndpointChat, a, true)
		if got.Content != a.Content || got.Reasoning != a.Reasoning || got.Finish != a.Finish || got.Usage != a.Usage || got.Model != a.Model {
			t.Fatalf("stream round trip: got %+v, want %+v", got, a)
		}
		if len(a.ToolCalls) > 0 && !jsonEqual(got.ToolCalls, a.ToolCalls) {
			t.Fatalf("tool calls %s, want %s", got.ToolCalls, a.ToolCalls)
		}
		if a.Content != "" && events < 3 {
			t.Fatalf("content not split into chunks: %d events", events)
		}
		body := AppendCompletionJSON(nil, EndpointChat, "id-2", 1700000000, a)
		parsed, err := ParseAnswer(EndpointChat, body)
		if err != nil || parsed.Content != a.Content || parsed.Finish != a.Finish || parsed.Usage != a.Usage {
			t.Fatalf("json round trip: %v %+v from %s", err, parsed, body)
		}
		var cc ChatCompletion
		if err := json.Unmarshal(body, &cc); err != nil || cc.Object != "chat.completion" || cc.ID != "id-2" {
			t.Fatalf("not a chat.completion: %v %s", err, body)
		}
	}
	a := &Answer{Model: "m", Content: "once upon a time", Finish: "stop", Usage: Usage{1, 4, 5, 0}}
	if got, _ := replay(t, EndpointCompletion, a, false); got.Content != a.Content || got.Finish != "stop" {
		t.Fatalf("completion stream round trip: %+v", got)
	}
	if p, err := ParseAnswer(EndpointCompletion, AppendCompletionJSON(nil, EndpointCompletion, "x", 1, a)); err != nil || p.Content != a.Content {
		t.Fatalf("completion json round trip: %v %+v", err, p)
	}
}

// assemble feeds a stream, written as SSE, to an Assembler.
func assemble(t *testing.T, ep Endpoint, stream string) (*Answer, error) {
	t.Helper()
	asm := NewAssembler(ep)
	sr := NewSSEReader(strings.NewReader(stream))
	for {
		ev, err := sr.Next()
		if errors.Is(err, io.EOF) {
			return asm.Answer()
		}
		if err != nil {
			t.Fatal(err)
		}
		asm.Add(&ev)
	}
}

// A stream is assembled (and so may be stored) only when it is whole and
// clean: a finish_reason, [DONE], and no error anywhere in it, whichever
// way the engine reports one (vLLM, SGLang, TGI and DashScope each have
// theirs).
func TestAssemblerRefusesIncompleteStreams(t *testing.T) {
	const (
		part = "data: {\"id\":\"c\",\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Partial answer \"},\"finish_reason\":null}]}\n\n"
		tail = "data: {\"id\":\"c\",\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"tail\"},\"finish_reason\":\"stop\"}]}\n\n"
		use  = "data: {\"id\":\"c\",\"model\":\"m\",\"choices\":[],\"usage\":{\"prompt_tokens\":1,\"completion_tokens\":2,\"total_tokens\":3}}\n\n"
		done = "data: [DONE]\n\n"
	)
	if a, err := assemble(t, EndpointChat, part+tail+use+done); err != nil || a.Content != "Partial answer tail" || a.Usage.TotalTokens != 3 {
		t.Fatalf("a clean stream: %+v %v", a, err)
	}
	if a, err := assemble(t, EndpointChat, "event: message\n"+part+tail+done); err != nil || a.Content != "Partial answer tail" {
		t.Fatalf("the default event name: %+v %v", a, err)
	}
	for _, c := range []struct {
		name, stream string
		want         error
	}{
		{"event: error", part + "event: error\ndata: {\"message\":\"engine dead\"}\n\n" + tail + done, ErrStreamError},
		{"another event name", part + "event: result\n" + tail + done, ErrStreamError},
		{"top-level error (SGLang, vLLM)", part + "data: {\"error\":{\"message\":\"boom\",\"code\":500}}\n\n" + tail + done, ErrStreamError},
		{"TGI error", part + "data: {\"error\":\"Request failed during generation\",\"error_type\":\"generation\"}\n\n" + tail + done, ErrStreamError},
		{"vLLM object error", part + "data: {\"object\":\"error\",\"message\":\"engine dead\",\"type\":\"InternalServerError\",\"code\":500}\n\n" + tail + done, ErrStreamError},
		{"DashScope code and message", part + "data: {\"code\":\"InternalError\",\"message\":\"x\",\"request_id\":\"r\"}\n\n" + tail + done, ErrStreamError},
		{"error beside choices", part + "data: {\"choices\":[],\"error\":{\"message\":\"x\"}}\n\n" + tail + done, ErrStreamError},
		{"unparsable chunk", part + "data: {\"choices\":[\n\n" + tail + done, ErrStreamError},
		{"data after [DONE]", part + tail + done + part, ErrStreamError},
		{"no [DONE]", part + tail, ErrStreamIncomplete},
		{"no finish_reason", part + done, ErrStreamIncomplete},
		{"several choices", "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"a\"},\"finish_reason\":\"stop\"},{\"index\":1,\"delta\":{\"content\":\"b\"},\"finish_reason\":\"stop\"}]}\n\n" + done, ErrNotAssembled},
	} {
		a, err := assemble(t, EndpointChat, c.stream)
		if !errors.Is(err, c.want) || !errors.Is(err, ErrNotAssembled) {
			t.Errorf("%s: got %+v, %v; want %v", c.name, a, err, c.want)
		}
	}
	// After an error the usage chunk is still told apart, so that a client
	// that did not ask for it does not get it.
	asm := NewAssembler(EndpointChat)
	asm.Add(&SSEEvent{Name: []byte("error"), Data: []byte(`{"message":"x"}`)})
	if !asm.Add(&SSEEvent{Data: []byte(`{"choices":[],"usage":{"total_tokens":3}}`)}) {
		t.Fatal("the usage chunk after an error is not reported as one")
	}
}

// An event stream sent for a non-streaming request becomes the JSON answer
// asked for, when it is whole and clean.
func TestStreamToJSON(t *testing.T) {
	a := &Answer{Model: "m", Content: "Paris.", Reasoning: "capital", Finish: "stop", Usage: Usage{1, 2, 3, 0}}
	var stream bytes.Buffer
	for _, ev := range StreamEvents(EndpointChat, "chatcmpl-7", 1700000000, a, 1, true) {
		stream.Write(ev)
	}
	body, err := StreamToJSON(EndpointChat, stream.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	var cc ChatCompletion
	if err := json.Unmarshal(body, &cc); err != nil || cc.ID != "chatcmpl-7" || cc.Created != 1700000000 || cc.Object != "chat.completion" {
		t.Fatalf("%v %s", err, body)
	}
	if p, err := ParseAnswer(EndpointChat, body); err != nil || p.Content != a.Content || p.Reasoning != a.Reasoning || p.Usage != a.Usage {
		t.Fatalf("%v %+v", err, p)
	}
	// Without the usage chunk, the JSON has no usage (it is not known).
	stream.Reset()
	for _, ev := range StreamEvents(EndpointChat, "chatcmpl-7", 1, a, 1, false) {
		stream.Write(ev)
	}
	if body, err := StreamToJSON(EndpointChat, stream.Bytes()); err != nil || bytes.Contains(body, []byte(`"usage"`)) {
		t.Fatalf("%v %s", err, body)
	}
	if _, err := StreamToJSON(EndpointChat, stream.Bytes()[:stream.Len()-len("data: [DONE]\n\n")]); !errors.Is(err, ErrStreamIncomplete) {
		t.Fatalf("a stream without [DONE]: %v", err)
	}
}

// FuzzStreamToJSON: whatever the bytes, no panic, and what comes out is a
// JSON answer that parses back.
func FuzzStreamToJSON(f *testing.F) {
	f.Add([]byte("data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"a\"},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n"))
	f.Add([]byte("event: error\ndata: {\"message\":\"x\"}\n\n"))
	f.Add([]byte("data: {\"choices\":[],\"usage\":{\"total_tokens\":1}}\n\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		body, err := StreamToJSON(EndpointChat, b)
		if err != nil {
			return
		}
		if _, err := ParseAnswer(EndpointChat, body); err != nil {
			t.Fatalf("%q gave %s: %v", b, body, err)
		}
	})
}

func TestSplitTokensJoinsBack(t *testing.T) {
	for _, s := range []string{"", "one", "one two three four five", "  lead and trail  ", "中文句子没有空格。Mixed 中英 text", "a\nb\tc"} {
		for n := 1; n <= 5; n++ {
			parts := SplitTokens(s, n)
			if strings.Join(parts, "") != s {
				t.Fatalf("%q n=%d: %q", s, n, parts)
			}
		}
	}
	if got := SplitTokens("a b c d e f", 2); !reflect.DeepEqual(got, []string{"a b ", "c d ", "e f"}) {
		t.Fatalf("pieces %q", got)
	}
}

func jsonEqual(a, b []byte) bool {
	var x, y any
	return json.Unmarshal(a, &x) == nil && json.Unmarshal(b, &y) == nil && reflect.DeepEqual(x, y)
}

func TestParseUsage(t *testing.T) {
	body := []byte(`{"id":"x","choices":[{"message":{"content":"the \"usage\": {not this}"}}],"usage": {"prompt_tokens":5,"completion_tokens":7,"total_tokens":12,"prompt_tokens_details":{"cached_tokens":3}}}`)
	u, ok := ParseUsage(body)
	if !ok || u != (Usage{5, 7, 12, 3}) {
		t.Fatalf("usage %+v ok=%v", u, ok)
	}
	for _, b := range []string{`{"choices":[]}`, `{"usage":null}`, `{"usage":{"prompt_tokens":`} {
		if _, ok := ParseUsage([]byte(b)); ok {
			t.Fatalf("%s: found usage", b)
		}
	}
}

func TestIsUsageOnly(t *testing.T) {
	for _, c := range []struct {
		data string
		want bool
	}{
		{`{"id":"c","object":"chat.completion.chunk","model":"m","choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5}}`, true},
		{`{"id":"c","choices": [ ],"usage":{"total_tokens":5}}`, true},
		{"{\"choices\":\n[\t]\n,\"usage\":{}}", true},
		{`{"id":"c","choices":[{"index":0,"delta":{"content":"hi"}}],"usage":null}`, false},
		{`{"id":"c","choices":[{"index":0,"delta":{"content":"\"choices\":[],\"usage\":{}"}}]}`, false},
		{`{"id":"c","choices":[]}`, false},
		{`{"usage":{"total_tokens":5}}`, false},
		{`{"choices":`, false},
		{`{"choices":[`, false},
		{``, false},
	} {
		if got := IsUsageOnly([]byte(c.data)); got != c.want {
			t.Errorf("IsUsageOnly(%s) = %v, want %v", c.data, got, c.want)
		}
	}
}

func FuzzIsUsageOnly(f *testing.F) {
	f.Add([]byte(`{"choices":[],"usage":{}}`))
	f.Add([]byte(`{"choices":[{"delta":{}}]}`))
	f.Add([]byte(`{"hh":"h\"choices\":","choices\":[],"choices":[],"usage":{}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		if got, want := indexChoicesKey(data), bytes.Index(data, choicesKey); got != want {
			t.Fatalf("indexChoicesKey(%q) = %d, want %d", data, got, want)
		}
		got := IsUsageOnly(data)
		// Without whitespace, it agrees with the plain search it replaced
		// whenever the first choices key is the one holding [].
		if !bytes.ContainsAny(data, " \t\r\n") && bytes.Count(data, []byte(`"choices":`)) <= 1 {
			want := bytes.Contains(data, []byte(`"choices":[]`)) && bytes.Contains(data, []byte(`"usage":`))
			if got != want {
				t.Fatalf("IsUsageOnly(%q) = %v, want %v", data, got, want)
			}
		}
	})
}

var benchChunk = []byte(`{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1796038047,"model":"qwen3-8b","choices":[{"index":0,"delta":{"content":" word"},"logprobs":null,"finish_reason":null}]}`)

// BenchmarkAssemblerAdd is the cache's work on each event of a stream it
// will store.
func BenchmarkAssemblerAdd(b *testing.B) {
	ev := SSEEvent{Raw: benchChunk, Data: benchChunk}
	asm := NewAssembler(EndpointChat)
	b.ReportAllocs()
	for b.Loop() {
		asm.Add(&ev)
		if len(asm.content) > 1<<20 {
			asm.content = asm.content[:0]
		}
	}
}

// BenchmarkCheckJSONAnswer is the check of every whole 2xx answer.
func BenchmarkCheckJSONAnswer(b *testing.B) {
	body := []byte(`{"id":"chatcmpl-1","object":"chat.completion","created":1796038047,"model":"qwen3-8b","choices":[{"index":0,"message":{"role":"assistant","content":"large little own days its other came as saw her days how mother me end others"},"logprobs":null,"finish_reason":"stop","stop_reason":null}],"usage":{"prompt_tokens":20,"total_tokens":36,"completion_tokens":16}}`)
	b.ReportAllocs()
	for b.Loop() {
		if err := checkJSONAnswer(body, "choices"); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkIsUsageOnly is the check of every event of a stream for the
// usage chunk, on an event that is not one.
func BenchmarkIsUsageOnly(b *testing.B) {
	data := []byte(`{"id":"chatcmpl-5916b453be108dc30000000000000001","object":"chat.completion.chunk","created":1796301454,"model":"qwen3-8b","choices":[{"index":0,"delta":{"content":"people "},"logprobs":null,"finish_reason":null}]}`)
	for b.Loop() {
		if IsUsageOnly(data) {
			b.Fatal("usage")
		}
	}
}
