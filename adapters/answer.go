package adapters

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"unicode"
	"unicode/utf8"

	"github.com/valyala/fastjson"
)

// Answer is a complete, assembled model answer: what the cache stores and
// what a replay renders.
type Answer struct {
	Model     string
	Content   string
	Reasoning string
	ToolCalls json.RawMessage // OpenAI tool_calls array, or nil
	Finish    string
	Usage     Usage
}

// ErrNotAssembled means the answer is incomplete or cannot be cached (an
// error, several choices, no finish reason).
var ErrNotAssembled = errors.New("answer incomplete")

var answerParsers fastjson.ParserPool

// ParseAnswer assembles an answer from a non-streaming response body.
func ParseAnswer(ep Endpoint, body []byte) (*Answer, error) {
	p := answerParsers.Get()
	defer answerParsers.Put(p)
	v, err := p.ParseBytes(body)
	if err != nil {
		return nil, err
	}
	if ep == EndpointResponses {
		return responseAnswer(v)
	}
	choices := v.GetArray("choices")
	if len(choices) != 1 {
		return nil, ErrNotAssembled
	}
	c := choices[0]
	a := &Answer{Model: string(v.GetStringBytes("model")), Finish: string(c.GetStringBytes("finish_reason"))}
	if ep == EndpointCompletion {
		a.Content = string(c.GetStringBytes("text"))
	} else {
		m := c.Get("message")
		if m == nil {
			return nil, ErrNotAssembled
		}
		a.Content = string(m.GetStringBytes("content"))
		a.Reasoning = string(m.GetStringBytes("reasoning_content"))
		if tc := m.Get("tool_calls"); tc != nil && len(tc.GetArray()) > 0 {
			a.ToolCalls = tc.MarshalTo(nil)
		}
	}
	parseUsage(v.Get("usage"), &a.Usage)
	if a.Finish == "" {
		return nil, ErrNotAssembled
	}
	return a, nil
}

// ParseUsage reads the usage object of a non-streaming answer without
// parsing the rest of it. ok is false when there is none.
func ParseUsage(body []byte) (u Usage, ok bool) {
	// Engines put usage last: look in the tail before the whole body.
	i := -1
	if tail := max(0, len(body)-256); tail > 0 {
		if j := bytes.LastIndex(body[tail:], []byte(`"usage"`)); j >= 0 {
			i = tail + j
		}
	}
	if i < 0 {
		i = bytes.LastIndex(body, []byte(`"usage"`))
	}
	if i < 0 {
		return u, false
	}
	rest := body[i+len(`"usage"`):]
	start := bytes.IndexByte(rest, '{')
	if start < 0 || len(bytes.TrimSpace(rest[:start])) != 1 { // only the colon between
		return u, false
	}
	depth, inString, escaped := 0, false, false
	for j := start; j < len(rest); j++ {
		c := rest[j]
		switch {
		case escaped:
			escaped = false
		case inString:
			escaped, inString = c == '\\', c != '"'
		case c == '"':
			inString = true
		case c == '{':
			depth++
		case c == '}':
			if depth--; depth == 0 {
				return parseUsageObject(rest[start : j+1])
			}
		}
	}
	return u, false
}

func parseUsageObject(b []byte) (u Usage, ok bool) {
	p := answerParsers.Get()
	defer answerParsers.Put(p)
	v, err := p.ParseBytes(b)
	if err != nil {
		return u, false
	}
	parseUsage(v, &u)
	return u, true
}

func parseUsage(u *fastjson.Value, dst *Usage) {
	if u == nil || u.Type() != fastjson.TypeObject {
		return
	}
	if u.Get("prompt_tokens") == nil && u.Get("input_tokens") != nil {
		responseUsage(u, dst) // the Responses API's names
		return
	}
	dst.PromptTokens = u.GetInt("prompt_tokens")
	dst.CompletionTokens = u.GetInt("completion_tokens")
	dst.TotalTokens = u.GetInt("total_tokens")
	if dst.TotalTokens == 0 {
		dst.TotalTokens = dst.PromptTokens + dst.CompletionTokens
	}
	dst.CachedTokens = u.GetInt("prompt_tokens_details", "cached_tokens")
}

// Reasons an Assembler gives no answer; each wraps ErrNotAssembled.
var (
	// ErrStreamError: the stream carried an error: a named event (event:
	// error, or any name but the default "message"), an error object in an
	// event's data ({"error":...}, or vLLM's {"object":"error",...}), an
	// event that is neither a chunk nor the usage chunk, unparsable JSON, or
	// data after [DONE].
	ErrStreamError = fmt.Errorf("%w: the stream carried an error", ErrNotAssembled)
	// ErrStreamIncomplete: the stream ended without [DONE] or without a
	// finish_reason.
	ErrStreamIncomplete = fmt.Errorf("%w: the stream ended without [DONE] or a finish_reason", ErrNotAssembled)
)

// Assembler rebuilds an answer from the events of a stream as they pass.
type Assembler struct {
	ep        Endpoint
	parser    fastjson.Parser
	model     string
	content   []byte
	reasoning []byte
	calls     []toolCallParts
	finish    string
	usage     Usage
	usageSeen bool
	choices   int  // highest choice index seen + 1
	done      bool // [DONE] arrived (Responses: the terminal event)
	fault     error
	answer    *Answer // Responses: the terminal event's response
}

type toolCallParts struct {
	id, typ, name string
	args          []byte
}

// NewAssembler starts assembling a stream for ep.
func NewAssembler(ep Endpoint) *Assembler { return &Assembler{ep: ep} }

var sseMessage = []byte("message")

// Add takes one event. It reports whether the event carries only usage
// (the include_usage chunk, with no choices), so a caller can hold it back
// from a client that did not ask for it.
func (s *Assembler) Add(ev *SSEEvent) (usageOnly bool) {
	if s.ep == EndpointResponses {
		s.addResponse(ev)
		return false
	}
	data := ev.Data
	switch {
	case len(ev.Name) > 0 && !bytes.Equal(ev.Name, sseMessage):
		// SSE's default event type is "message"; OpenAI-compatible
		// engines name none. A named one (event: error) is not a chunk.
		s.fail(ErrStreamError)
		return false
	case s.done:
		s.fail(ErrStreamError) // anything after [DONE]
		return false
	case ev.IsDone():
		s.done = true
		return false
	case len(data) == 0 || data[0] != '{':
		return false
	case s.fault != nil:
		return IsUsageOnly(data)
	}
	v, err := s.parser.ParseBytes(data)
	if err != nil {
		s.fail(ErrStreamError)
		return false
	}
	choices, u := v.Get("choices"), v.Get("usage")
	if u != nil && u.Type() != fastjson.TypeObject {
		u = nil
	}
	if (choices == nil && u == nil) || v.Get("error") != nil {
		// Neither a chunk nor the usage chunk: an error object
		// ({"error":...}, vLLM's {"object":"error","message":...},
		// DashScope's {"code":...,"message":...}) or something unknown.
		s.fail(ErrStreamError)
		return false
	}
	if m := v.GetStringBytes("model"); len(m) > 0 && s.model == "" {
		s.model = string(m)
	}
	list := choices.GetArray()
	if u != nil {
		parseUsage(u, &s.usage)
		s.usageSeen = true
		if len(list) == 0 {
			return true
		}
	}
	for _, c := range list {
		idx := c.GetInt("index")
		if idx+1 > s.choices {
			s.choices = idx + 1
		}
		if idx != 0 {
			continue
		}
		if f := c.GetStringBytes("finish_reason"); len(f) > 0 {
			s.finish = string(f)
		}
		if s.ep == EndpointCompletion {
			s.content = append(s.content, c.GetStringBytes("text")...)
			continue
		}
		d := c.Get("delta")
		if d == nil {
			continue
		}
		s.content = append(s.content, d.GetStringBytes("content")...)
		s.reasoning = append(s.reasoning, d.GetStringBytes("reasoning_content")...)
		for _, tc := range d.GetArray("tool_calls") {
			i := tc.GetInt("index")
			if i < 0 || i > 128 {
				s.fail(ErrNotAssembled)
				continue
			}
			for len(s.calls) <= i {
				s.calls = append(s.calls, toolCallParts{})
			}
			p := &s.calls[i]
			if id := tc.GetStringBytes("id"); len(id) > 0 {
				p.id = string(id)
			}
			if t := tc.GetStringBytes("type"); len(t) > 0 {
				p.typ = string(t)
			}
			if n := tc.GetStringBytes("function", "name"); len(n) > 0 {
				p.name += string(n)
			}
			p.args = append(p.args, tc.GetStringBytes("function", "arguments")...)
		}
	}
	return false
}

// fail records the first reason the stream cannot be assembled.
func (s *Assembler) fail(err error) {
	if s.fault == nil {
		s.fault = err
	}
}

// Answer returns the assembled answer once the stream has finished
// cleanly: no error in it, a finish_reason for its one choice, and [DONE].
// Otherwise the error says why (ErrStreamError, ErrStreamIncomplete, or
// ErrNotAssembled for an answer that is whole but not one to store, such as
// several choices).
func (s *Assembler) Answer() (*Answer, error) {
	switch {
	case s.fault != nil:
		return nil, s.fault
	case s.ep == EndpointResponses && !s.done:
		return nil, ErrStreamIncomplete
	case s.ep == EndpointResponses:
		return s.answer, nil
	case s.finish == "" || !s.done:
		return nil, ErrStreamIncomplete
	case s.choices > 1:
		return nil, ErrNotAssembled
	}
	a := &Answer{Model: s.model, Content: string(s.content), Reasoning: string(s.reasoning), Finish: s.finish, Usage: s.usage}
	if len(s.calls) > 0 {
		calls := make([]ToolCall, len(s.calls))
		for i, p := range s.calls {
			typ := p.typ
			if typ == "" {
				typ = "function"
			}
			calls[i] = ToolCall{ID: p.id, Type: typ, Function: ToolCallFunction{Name: p.name, Arguments: string(p.args)}}
		}
		a.ToolCalls, _ = json.Marshal(calls)
	}
	return a, nil
}

// IsUsageOnly reports whether a stream event's data is the usage chunk that
// include_usage adds (no choices), cheaply and without parsing: the first
// "choices" key (a key: a quote inside a string is escaped) holds an empty
// array, and "usage" follows. It runs on every event, so it stops at the
// choices key instead of searching the whole event for "choices":[].
func IsUsageOnly(data []byte) bool {
	i := indexChoicesKey(data)
	if i < 0 {
		return false
	}
	j := skipJSONSpace(data, i+len(choicesKey))
	if j == len(data) || data[j] != '[' {
		return false
	}
	j = skipJSONSpace(data, j+1)
	if j == len(data) || data[j] != ']' {
		return false
	}
	return bytes.Contains(data, usageKey)
}

// indexChoicesKey is bytes.Index(data, choicesKey), found by its 'h': a
// chunk is full of quotes, which make the general search slow, and holds
// few h's before its choices key.
func indexChoicesKey(data []byte) int {
	for off := 0; ; {
		j := bytes.IndexByte(data[off:], 'h')
		if j < 0 {
			return -1
		}
		if i := off + j - 2; i >= 0 && bytes.HasPrefix(data[i:], choicesKey) {
			return i
		}
		off += j + 1
	}
}

// skipJSONSpace is the index of the first byte of b from i on that is not
// JSON whitespace, or len(b).
func skipJSONSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\r' || b[i] == '\n') {
		i++
	}
	return i
}

var (
	choicesKey = []byte(`"choices":`)
	usageKey   = []byte(`"usage":`)
)

// AppendCompletionJSON renders a as a non-streaming answer: chat.completion
// for chat, text_completion for completions.
func AppendCompletionJSON(dst []byte, ep Endpoint, id string, created int64, a *Answer) []byte {
	if ep == EndpointResponses {
		return appendResponseObject(dst, id, created, a, true)
	}
	return appendCompletionJSON(dst, ep, id, created, a, true)
}

// appendCompletionJSON is AppendCompletionJSON, without the usage object
// when withUsage is false (the usage is not known).
func appendCompletionJSON(dst []byte, ep Endpoint, id string, created int64, a *Answer, withUsage bool) []byte {
	dst = append(dst, `{"id":`...)
	dst = AppendJSONString(dst, id)
	if ep == EndpointCompletion {
		dst = append(dst, `,"object":"text_completion","created":`...)
	} else {
		dst = append(dst, `,"object":"chat.completion","created":`...)
	}
	dst = strconv.AppendInt(dst, created, 10)
	dst = append(dst, `,"model":`...)
	dst = AppendJSONString(dst, a.Model)
	dst = append(dst, `,"choices":[{"index":0,`...)
	if ep == EndpointCompletion {
		dst = append(dst, `"text":`...)
		dst = AppendJSONString(dst, a.Content)
	} else {
		dst = append(dst, `"message":{"role":"assistant","content":`...)
		if a.Content == "" && len(a.ToolCalls) > 0 {
			dst = append(dst, "null"...)
		} else {
			dst = AppendJSONString(dst, a.Content)
		}
		if a.Reasoning != "" {
			dst = append(dst, `,"reasoning_content":`...)
			dst = AppendJSONString(dst, a.Reasoning)
		}
		if len(a.ToolCalls) > 0 {
			dst = append(dst, `,"tool_calls":`...)
			dst = appendToolCalls(dst, a.ToolCalls)
		}
		dst = append(dst, '}')
	}
	dst = append(dst, `,"logprobs":null,"finish_reason":`...)
	dst = AppendJSONString(dst, a.Finish)
	dst = append(dst, "}]"...)
	if withUsage {
		dst = append(dst, `,"usage":`...)
		dst = appendUsage(dst, a.Usage)
	}
	return append(dst, '}')
}

// StreamToJSON turns a whole SSE answer (an engine's answer to a
// non-streaming request that streamed all the same) into the one
// chat.completion (or text_completion) JSON that the request asked for.
// The stream must be whole and clean, as the cache requires of one it
// stores (see Assembler.Answer); the error says why when it is not. The id
// and created time are the stream's; usage is present when the stream had
// it.
func StreamToJSON(ep Endpoint, body []byte) ([]byte, error) {
	if ep == EndpointResponses {
		return responseStreamToJSON(body)
	}
	sr := NewSSEReader(bytes.NewReader(body))
	asm := NewAssembler(ep)
	var id string
	var created int64
	for {
		ev, err := sr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, err
		}
		if id == "" && len(ev.Data) > 0 && ev.Data[0] == '{' {
			if v, err := fastjson.ParseBytes(ev.Data); err == nil {
				id, created = string(v.GetStringBytes("id")), v.GetInt64("created")
			}
		}
		asm.Add(&ev)
	}
	a, err := asm.Answer()
	if err != nil {
		return nil, err
	}
	if id == "" {
		id = "chatcmpl-frontdoor"
		if ep == EndpointCompletion {
			id = "cmpl-frontdoor"
		}
	}
	return appendCompletionJSON(make([]byte, 0, 256+len(a.Content)+len(a.Reasoning)+len(a.ToolCalls)), ep, id, created, a, asm.usageSeen), nil
}

// appendToolCalls appends an answer's tool calls as JSON that is valid
// and compact whatever they hold: they were a node's, read by fastjson,
// whose MarshalTo writes Go escapes (\a, \x00) and its numbers as written
// (NaN); null when they do not parse.
func appendToolCalls(dst []byte, calls json.RawMessage) []byte {
	p := answerParsers.Get()
	defer answerParsers.Put(p)
	v, err := p.ParseBytes(calls)
	if err != nil {
		return append(dst, "null"...)
	}
	return AppendJSONValue(dst, v)
}

func appendUsage(dst []byte, u Usage) []byte {
	dst = append(dst, `{"prompt_tokens":`...)
	dst = strconv.AppendInt(dst, int64(u.PromptTokens), 10)
	dst = append(dst, `,"completion_tokens":`...)
	dst = strconv.AppendInt(dst, int64(u.CompletionTokens), 10)
	dst = append(dst, `,"total_tokens":`...)
	dst = strconv.AppendInt(dst, int64(u.TotalTokens), 10)
	dst = append(dst, `,"prompt_tokens_details":{"cached_tokens":`...)
	dst = strconv.AppendInt(dst, int64(u.CachedTokens), 10)
	return append(dst, "}}"...)
}

// StreamEvents renders a as a complete SSE stream: a role chunk, the text
// in pieces of about chunkTokens tokens, tool calls, a finish chunk, a usage
// chunk when includeUsage, then [DONE]. Each element is one whole event.
func StreamEvents(ep Endpoint, id string, created int64, a *Answer, chunkTokens int, includeUsage bool) [][]byte {
	if ep == EndpointResponses {
		return responseEvents(id, created, a, chunkTokens)
	}
	object := "chat.completion.chunk"
	if ep == EndpointCompletion {
		object = "text_completion"
	}
	head := func() []byte {
		b := append([]byte(`{"id":`), AppendJSONString(nil, id)...)
		b = append(b, `,"object":"`+object+`","created":`...)
		b = strconv.AppendInt(b, created, 10)
		b = append(b, `,"model":`...)
		b = AppendJSONString(b, a.Model)
		return append(b, `,"choices":[`...)
	}
	var events [][]byte
	emit := func(b []byte) { events = append(events, AppendSSEData(nil, b)) }
	delta := func(field, text string) {
		b := head()
		if ep == EndpointCompletion {
			b = append(b, `{"index":0,"text":`...)
			b = AppendJSONString(b, text)
			b = append(b, `,"finish_reason":null}]}`...)
		} else {
			b = append(b, `{"index":0,"delta":{"`+field+`":`...)
			b = AppendJSONString(b, text)
			b = append(b, `},"logprobs":null,"finish_reason":null}]}`...)
		}
		emit(b)
	}
	if ep == EndpointChat {
		emit(append(head(), `{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}`...))
		for _, piece := range SplitTokens(a.Reasoning, chunkTokens) {
			delta("reasoning_content", piece)
		}
	}
	for _, piece := range SplitTokens(a.Content, chunkTokens) {
		delta("content", piece)
	}
	if ep == EndpointChat && len(a.ToolCalls) > 0 {
		if calls, err := fastjson.ParseBytes(a.ToolCalls); err == nil {
			var arena fastjson.Arena
			for i, c := range calls.GetArray() {
				c.Set("index", arena.NewNumberInt(i))
			}
			b := append(head(), `{"index":0,"delta":{"tool_calls":`...)
			b = AppendJSONValue(b, calls)
			emit(append(b, `},"logprobs":null,"finish_reason":null}]}`...))
		}
	}
	fin := head()
	if ep == EndpointCompletion {
		fin = append(fin, `{"index":0,"text":"","finish_reason":`...)
	} else {
		fin = append(fin, `{"index":0,"delta":{},"logprobs":null,"finish_reason":`...)
	}
	fin = AppendJSONString(fin, a.Finish)
	emit(append(fin, `}]}`...))
	if includeUsage {
		b := head()
		b = append(b, `],"usage":`...)
		b = appendUsage(b, a.Usage)
		emit(append(b, '}'))
	}
	return append(events, AppendSSEDone(nil))
}

// SplitTokens cuts text into pieces of about n tokens each, cutting only
// after whitespace or after a CJK character, so that the pieces joined give
// the text back exactly.
func SplitTokens(text string, n int) []string {
	if text == "" {
		return nil
	}
	if n < 1 {
		n = 1
	}
	var out []string
	start, count, inWord := 0, 0, false
	for i, r := range text {
		size := utf8.RuneLen(r)
		switch {
		case unicode.Is(unicode.Han, r) || unicode.Is(unicode.Hiragana, r) || unicode.Is(unicode.Katakana, r) || unicode.Is(unicode.Hangul, r):
			count++
			inWord = false
		case unicode.IsSpace(r):
			if inWord {
				count++
			}
			inWord = false
		default:
			inWord = true
		}
		if count >= n && !inWord {
			out = append(out, text[start:i+size])
			start, count = i+size, 0
		}
	}
	if start < len(text) {
		out = append(out, text[start:])
	}
	return out
}
