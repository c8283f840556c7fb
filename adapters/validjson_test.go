package adapters

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"math"
	"strconv"
	"testing"
	"unicode/utf8"
)

// FuzzAnswersAreValidJSON holds issue 45's rule that every JSON the
// gateway writes to a client is valid JSON, whatever a node or the cache
// put in the answer: it builds answers from fuzzed text, tool calls, ids,
// model names, usage and floats, and runs them through every writer of
// client JSON (the chat, completions and Responses objects, their replayed
// event streams and the JSON made from a stream, the embeddings answer,
// the error envelope and stream error event), asserting encoding/json's
// json.Valid of each object and of each event's data but [DONE].
func FuzzAnswersAreValidJSON(f *testing.F) {
	f.Add("hello world", "think", `[{"id":"c1","type":"function","function":{"name":"f","arguments":"{}"}}]`,
		"chatcmpl-1", "qwen3-8b", "stop", "0.25", 0.1, uint32(0x3dcccccd), 3, 5, int64(1700000000), uint8(2), uint8(0))
	f.Add("a\xffb\x00\a\u2028\"\\\n\r\t", "\xed\xa0\x80", "[{\"id\":\"\a\x00\",\"x\":NaN,\"y\":inf,\"z\":+1,\"w\":01}]",
		"id\xfe\n", "m\x01\"", "len\x7fgth", "NaN", math.Inf(1), uint32(0x7fc00000), -1, math.MaxInt32, int64(-1), uint8(0), uint8(0xff))
	f.Add("日本語のテキスト", "", `{"not":"an array"}`, "resp_x", "", "length", "1e39", math.NaN(), uint32(0xff800000), 0, 0, int64(0), uint8(1), uint8(1))
	f.Add("", "", "[", "", "m", "tool_calls", "-0", math.Copysign(0, -1), uint32(0x00000001), 1, 1, int64(math.MaxInt64), uint8(255), uint8(2))
	f.Add("x", "y", "[\n{\"id\":\"a\"}\r\n]", "i", "m", "stop", "Infinity", 3.4028235e38, uint32(0x7f7fffff), 2, 3, int64(5), uint8(1), uint8(3))
	f.Fuzz(func(t *testing.T, content, reasoning, toolCalls, id, model, finish, number string,
		x float64, bits uint32, prompt, completion int, created int64, chunk, flags uint8) {
		a := &Answer{Model: model, Content: content, Reasoning: reasoning, Finish: finish,
			Usage: Usage{PromptTokens: prompt, CompletionTokens: completion, TotalTokens: prompt + completion}}
		if toolCalls != "" {
			a.ToolCalls = json.RawMessage(toolCalls)
		}
		for _, ep := range []Endpoint{EndpointChat, EndpointCompletion, EndpointResponses} {
			out := AppendCompletionJSON(nil, ep, id, created, a)
			mustBeJSON(t, ep.Path()+" answer", out)
			if ep == EndpointChat && utf8.ValidString(content) && (content != "" || len(a.ToolCalls) == 0) {
				var got struct {
					Choices []struct{ Message struct{ Content string } }
				}
				if err := json.Unmarshal(out, &got); err != nil || len(got.Choices) != 1 || got.Choices[0].Message.Content != content {
					t.Fatalf("chat answer reads back as %+v (%v), want content %q", got, err, content)
				}
			}
			events := StreamEvents(ep, id, created, a, int(chunk%8), flags&1 != 0)
			mustBeEvents(t, ep.Path()+" stream", events)
			if body, err := StreamToJSON(ep, bytes.Join(events, nil)); err == nil {
				mustBeJSON(t, ep.Path()+" stream made JSON", body)
			}
			e := &APIError{Status: 502, Type: TypeUpstream, Message: content, Param: model, Code: id}
			mustBeEvents(t, ep.Path()+" stream error", [][]byte{StreamErrorEvent(ep, e)})
			mustBeJSON(t, "error envelope", e.AppendJSON(nil))
		}

		vec := []float32{float32(x), math.Float32frombits(bits), float32(prompt)}
		vectors := []Embedding{{Vector: vec, Wide: flags&2 != 0}, {Vector: vec[:1], Wide: flags&2 == 0}}
		for _, b64 := range []bool{false, true} {
			mustBeJSON(t, "embeddings answer", AppendEmbeddingsJSON(nil, model, vectors, b64, a.Usage))
		}
		mustBeJSON(t, "float64", AppendJSONFloat(nil, x, 64))
		mustBeJSON(t, "float32", AppendJSONFloat(nil, float64(math.Float32frombits(bits)), 32))

		// A node's embeddings answer with the number as written: read or
		// refused, never written back as anything but JSON.
		body := []byte(`{"data":[{"index":0,"embedding":[` + number + `,0.5]}],"model":` + strconv.Quote(model) + `}`)
		if ans, err := ParseEmbeddingsAnswer(body, 1); err == nil {
			mustBeJSON(t, "embeddings answer read from a node", AppendEmbeddingsJSON(nil, ans.Model, ans.Vectors, false, ans.Usage))
		}
	})
}

func mustBeJSON(t *testing.T, what string, b []byte) {
	t.Helper()
	if !json.Valid(b) {
		t.Fatalf("%s is not valid JSON: %q", what, b)
	}
}

// mustBeEvents checks that each of events is one whole SSE event, read
// back as it was written, whose data is valid JSON (or [DONE]).
func mustBeEvents(t *testing.T, what string, events [][]byte) {
	t.Helper()
	for i, ev := range events {
		r := NewSSEReader(bytes.NewReader(ev))
		got, err := r.Next()
		if err != nil || !bytes.Equal(got.Raw, ev) {
			t.Fatalf("%s: event %d is not one whole event (%v): %q", what, i, err, ev)
		}
		if _, err := r.Next(); !errors.Is(err, io.EOF) {
			t.Fatalf("%s: event %d holds more than one event: %q", what, i, ev)
		}
		if !got.IsDone() {
			mustBeJSON(t, what+" event "+strconv.Itoa(i), got.Data)
		}
	}
}
