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
		if ev.IsDone() {
			continue
		}
		if !json.Valid(ev.Data) {
			t.Fatalf("invalid chunk JSON: %s", ev.Data)
		}
		events++
		if asm.Add(ev.Data) {
			usageEvents++
		}
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
		{Model: "m", Content: "巴黎是法国的首都。", Reasoning: "用户问首都", Finish: "stop", Usage: Usage{1, 2, 3}},
		{Model: "m", ToolCalls: calls, Finish: "tool_calls", Usage: Usage{1, 2, 3}},
		{Model: "m", Content: "line one\nline \"two\"\t", Finish: "length", Usage: Usage{1, 2, 3}},
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
	a := &Answer{Model: "m", Content: "once upon a time", Finish: "stop", Usage: Usage{1, 4, 5}}
	if got, _ := replay(t, EndpointCompletion, a, false); got.Content != a.Content || got.Finish != "stop" {
		t.Fatalf("completion stream round trip: %+v", got)
	}
	if p, err := ParseAnswer(EndpointCompletion, AppendCompletionJSON(nil, EndpointCompletion, "x", 1, a)); err != nil || p.Content != a.Content {
		t.Fatalf("completion json round trip: %v %+v", err, p)
	}
}

func TestAssemblerRefusesIncompleteStreams(t *testing.T) {
	asm := NewAssembler(EndpointChat)
	asm.Add([]byte(`{"choices":[{"index":0,"delta":{"content":"half"},"finish_reason":null}]}`))
	if _, err := asm.Answer(); err == nil {
		t.Fatal("a stream without finish_reason must not be cached")
	}
	asm.Add([]byte(`{"error":{"message":"boom"}}`))
	asm.Add([]byte(`{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}`))
	if _, err := asm.Answer(); err == nil {
		t.Fatal("a stream with an error event must not be cached")
	}
	two := NewAssembler(EndpointChat)
	two.Add([]byte(`{"choices":[{"index":0,"delta":{"content":"a"},"finish_reason":"stop"},{"index":1,"delta":{"content":"b"},"finish_reason":"stop"}]}`))
	if _, err := two.Answer(); err == nil {
		t.Fatal("n>1 streams must not be cached")
	}
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
	body := []byte(`{"id":"x","choices":[{"message":{"content":"the \"usage\": {not this}"}}],"usage": {"prompt_tokens":5,"completion_tokens":7,"total_tokens":12,"prompt_tokens_details":{"cached_tokens":0}}}`)
	u, ok := ParseUsage(body)
	if !ok || u != (Usage{5, 7, 12}) {
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
	f.Fuzz(func(t *testing.T, data []byte) {
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
