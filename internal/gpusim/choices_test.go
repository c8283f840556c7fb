package gpusim

import (
	"encoding/json"
	"io"
	"strings"
	"testing"
)

type simChoice struct {
	Index   int `json:"index"`
	Message struct {
		Content   *string `json:"content"`
		ToolCalls []struct {
			ID       string `json:"id"`
			Type     string `json:"type"`
			Function struct {
				Name      string `json:"name"`
				Arguments string `json:"arguments"`
			} `json:"function"`
		} `json:"tool_calls"`
	} `json:"message"`
	Text  string `json:"text"`
	Delta struct {
		Content   string `json:"content"`
		ToolCalls []struct {
			Index    int    `json:"index"`
			ID       string `json:"id"`
			Function struct {
				Name      string `json:"name"`
				Arguments string `json:"arguments"`
			} `json:"function"`
		} `json:"tool_calls"`
	} `json:"delta"`
	Finish *string `json:"finish_reason"`
}

type simAnswer struct {
	Choices []simChoice `json:"choices"`
	Usage   *struct {
		Completion int `json:"completion_tokens"`
	} `json:"usage"`
}

// streamChunks decodes every chunk of an SSE body up to [DONE].
func streamChunks(t *testing.T, r io.Reader) []simAnswer {
	t.Helper()
	var out []simAnswer
	for _, ev := range sseEvents(t, r) {
		if ev == "[DONE]" {
			break
		}
		var chunk simAnswer
		if err := json.Unmarshal([]byte(ev), &chunk); err != nil {
			t.Fatalf("chunk %q: %v", ev, err)
		}
		out = append(out, chunk)
	}
	return out
}

const toolsJSON = `"tools":[{"type":"function","function":{"name":"search","parameters":{"type":"object"}}},{"type":"function","function":{"name":"weather","parameters":{"type":"object"}}}]`

// n asks for n choices, streamed and not: choice 0 is what n 1 says, the
// others differ, and usage counts every choice's tokens.
func TestNChoices(t *testing.T) {
	s := startServer(t, func(c *Config) { c.OutputTokens = 6 })
	c := newClient(t)
	url := s.URL() + "/v1/chat/completions"
	body := `{"model":"` + DefaultConfig().Models[0] + `","n":3,"messages":[{"role":"user","content":"three ways"}]`
	want0 := ExpectedText(PromptText([]byte(body+"}")), 6)

	r := post(t, c, url, body+"}")
	a := decode[simAnswer](t, r.body)
	if r.status != 200 || len(a.Choices) != 3 || a.Usage == nil || a.Usage.Completion != 18 {
		t.Fatalf("n 3: %d %s", r.status, r.body)
	}
	seen := map[string]bool{}
	for i, ch := range a.Choices {
		if ch.Index != i || ch.Message.Content == nil || ch.Finish == nil || *ch.Finish != "stop" {
			t.Fatalf("choice %d: %s", i, r.body)
		}
		seen[*ch.Message.Content] = true
	}
	if *a.Choices[0].Message.Content != want0 || len(seen) != 3 {
		t.Fatalf("choice 0 %q (want %q), %d distinct", *a.Choices[0].Message.Content, want0, len(seen))
	}

	resp, cancel := openStream(t, c, url, body+`,"stream":true,"stream_options":{"include_usage":true}}`)
	defer cancel()
	texts := make([]string, 3)
	finishes, usage := 0, 0
	for _, chunk := range streamChunks(t, resp.Body) {
		if chunk.Usage != nil {
			usage = chunk.Usage.Completion
		}
		for _, ch := range chunk.Choices {
			texts[ch.Index] += ch.Delta.Content
			if ch.Finish != nil {
				finishes++
			}
		}
	}
	for i, txt := range texts {
		if txt != *a.Choices[i].Message.Content {
			t.Errorf("streamed choice %d %q, unary %q", i, txt, *a.Choices[i].Message.Content)
		}
	}
	if finishes != 3 || usage != 18 {
		t.Fatalf("stream: %d finish reasons, usage %d", finishes, usage)
	}
}

// tool_choice "required" calls the first tool and a named function that
// one, streamed and not, in OpenAI's shape; "auto" answers with text.
func TestToolCalls(t *testing.T) {
	s := startServer(t, func(c *Config) { c.OutputTokens = 5 })
	c := newClient(t)
	url := s.URL() + "/v1/chat/completions"
	base := `{"model":"` + DefaultConfig().Models[0] + `","messages":[{"role":"user","content":"find it"}],` + toolsJSON
	for choice, name := range map[string]string{
		`"required"`: "search",
		`{"type":"function","function":{"name":"weather"}}`: "weather",
	} {
		body := base + `,"tool_choice":` + choice
		r := post(t, c, url, body+"}")
		a := decode[simAnswer](t, r.body)
		if r.status != 200 || len(a.Choices) != 1 || len(a.Choices[0].Message.ToolCalls) != 1 || a.Choices[0].Message.Content != nil {
			t.Fatalf("%s: %d %s", choice, r.status, r.body)
		}
		call := a.Choices[0].Message.ToolCalls[0]
		var args struct{ Text string }
		if call.Type != "function" || call.Function.Name != name || !strings.HasPrefix(call.ID, "call_") ||
			json.Unmarshal([]byte(call.Function.Arguments), &args) != nil || len(strings.Fields(args.Text)) != 5 || *a.Choices[0].Finish != "tool_calls" {
			t.Fatalf("%s: call %+v finish %v", choice, call, *a.Choices[0].Finish)
		}
		// Streamed: the first delta names the call, the others carry its
		// arguments; they assemble to the unary call.
		resp, cancel := openStream(t, c, url, body+`,"stream":true}`)
		var id, fn, argsStreamed, finish string
		for _, chunk := range streamChunks(t, resp.Body) {
			for _, ch := range chunk.Choices {
				for _, tc := range ch.Delta.ToolCalls {
					id += tc.ID
					fn += tc.Function.Name
					argsStreamed += tc.Function.Arguments
				}
				if ch.Delta.Content != "" {
					t.Fatalf("content in a tool call stream: %+v", chunk)
				}
				if ch.Finish != nil {
					finish = *ch.Finish
				}
			}
		}
		cancel()
		if fn != name || argsStreamed != call.Function.Arguments || !strings.HasPrefix(id, "call_") || finish != "tool_calls" {
			t.Fatalf("%s streamed: id %q name %q args %q finish %q; unary args %q", choice, id, fn, argsStreamed, finish, call.Function.Arguments)
		}
	}
	r := post(t, c, url, base+`,"tool_choice":"auto"}`)
	a := decode[simAnswer](t, r.body)
	if len(a.Choices) != 1 || a.Choices[0].Message.Content == nil || len(a.Choices[0].Message.ToolCalls) != 0 {
		t.Fatalf("auto: %s", r.body)
	}
}
