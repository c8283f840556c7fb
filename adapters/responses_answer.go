package adapters

import (
	"bytes"
	"fmt"

	"github.com/valyala/fastjson"
)

// Reading the Responses API's answers: the response object (a
// non-streaming answer, and the "response" of a stream's terminal event)
// and the events of a stream. Only what the cache can replay faithfully is
// assembled into an Answer: one assistant message of output_text parts,
// optionally after one reasoning item whose content is plain
// reasoning_text, finished ("completed", or "incomplete" for
// max_output_tokens). Function calls, refusals, reasoning summaries or
// encrypted reasoning, built-in tool calls and failed responses are passed
// on as they came and not stored.

// The terminal events of a Responses stream: the last event a clean stream
// sends (no "data: [DONE]" follows in OpenAI's protocol).
var (
	evResponseCompleted  = []byte("response.completed")
	evResponseIncomplete = []byte("response.incomplete")
	evResponseFailed     = []byte("response.failed")
	evError              = []byte("error")
)

// responseAnswer assembles a response object into an Answer.
func responseAnswer(v *fastjson.Value) (*Answer, error) {
	if v == nil || v.Type() != fastjson.TypeObject {
		return nil, ErrNotAssembled
	}
	a := &Answer{Model: string(v.GetStringBytes("model"))}
	switch string(v.GetStringBytes("status")) {
	case "completed":
		a.Finish = "stop"
	case "incomplete":
		if string(v.GetStringBytes("incomplete_details", "reason")) != "max_output_tokens" {
			return nil, ErrNotAssembled
		}
		a.Finish = "length"
	default:
		return nil, ErrNotAssembled
	}
	responseUsage(v.Get("usage"), &a.Usage)
	messages, reasoning := 0, 0
	var content, thought []byte
	for _, it := range v.GetArray("output") {
		switch string(it.GetStringBytes("type")) {
		case "message":
			messages++
			if string(it.GetStringBytes("role")) != "assistant" {
				return nil, ErrNotAssembled
			}
			for _, part := range it.GetArray("content") {
				if string(part.GetStringBytes("type")) != "output_text" || len(part.GetArray("annotations")) > 0 {
					return nil, ErrNotAssembled // a refusal, or citations a replay would lose
				}
				content = append(content, part.GetStringBytes("text")...)
			}
		case "reasoning":
			reasoning++
			if len(it.GetArray("summary")) > 0 || len(it.GetStringBytes("encrypted_content")) > 0 {
				return nil, ErrNotAssembled
			}
			for _, part := range it.GetArray("content") {
				if string(part.GetStringBytes("type")) != "reasoning_text" {
					return nil, ErrNotAssembled
				}
				thought = append(thought, part.GetStringBytes("text")...)
			}
		default:
			return nil, ErrNotAssembled
		}
	}
	if messages != 1 || reasoning > 1 {
		return nil, ErrNotAssembled
	}
	a.Content, a.Reasoning = string(content), string(thought)
	return a, nil
}

// responseUsage reads the Responses API's usage (input_tokens,
// output_tokens) into dst.
func responseUsage(u *fastjson.Value, dst *Usage) bool {
	if u == nil || u.Type() != fastjson.TypeObject {
		return false
	}
	dst.PromptTokens = u.GetInt("input_tokens")
	dst.CompletionTokens = u.GetInt("output_tokens")
	dst.TotalTokens = u.GetInt("total_tokens")
	if dst.TotalTokens == 0 {
		dst.TotalTokens = dst.PromptTokens + dst.CompletionTokens
	}
	dst.CachedTokens = u.GetInt("input_tokens_details", "cached_tokens")
	return true
}

// ResponseID is the id of a Responses API response object (a non-streaming
// answer's body); "" when there is none.
func ResponseID(body []byte) string {
	p := answerParsers.Get()
	defer answerParsers.Put(p)
	v, err := p.ParseBytes(body)
	if err != nil {
		return ""
	}
	return string(v.GetStringBytes("id"))
}

// ResponseEvent is what a Responses stream's event says, for the gateway's
// accounting: the response id (of response.created and every event that
// carries the response object) and, on a terminal event, the usage.
type ResponseEvent struct {
	ID       string
	Usage    Usage
	Terminal bool // response.completed, .incomplete or .failed
	HasUsage bool
}

// ReadResponseEvent reads ev as a Responses stream event. Only events that
// carry the response object (response.created, response.in_progress and
// the terminal ones) are parsed; deltas cost a name comparison.
func ReadResponseEvent(ev *SSEEvent) (re ResponseEvent, ok bool) {
	name := ev.Name
	if len(name) == 0 { // a server that names no events: the data's type says
		name = peekType(ev.Data)
	}
	switch string(name) {
	case "response.created", "response.in_progress", "response.queued":
	case "response.completed", "response.incomplete", "response.failed":
		re.Terminal = true
	default:
		return re, false
	}
	p := answerParsers.Get()
	defer answerParsers.Put(p)
	v, err := p.ParseBytes(ev.Data)
	if err != nil {
		return re, false
	}
	r := v.Get("response")
	if r == nil || r.Type() != fastjson.TypeObject {
		return re, false
	}
	re.ID = string(r.GetStringBytes("id"))
	if re.Terminal {
		re.HasUsage = responseUsage(r.Get("usage"), &re.Usage)
	}
	return re, true
}

// peekType is the value of a leading "type" member of an event's JSON, as
// OpenAI and vLLM write it; nil otherwise.
func peekType(data []byte) []byte {
	rest, ok := bytes.CutPrefix(data, []byte(`{"type":"`))
	if !ok {
		return nil
	}
	if i := bytes.IndexByte(rest, '"'); i >= 0 {
		return rest[:i]
	}
	return nil
}

// addResponse is Assembler.Add for a Responses stream: the answer is the
// terminal event's response object; the deltas before it are not needed.
func (s *Assembler) addResponse(ev *SSEEvent) {
	data := ev.Data
	if ev.IsDone() || len(data) == 0 || data[0] != '{' {
		return // a "[DONE]" some servers add, or a keep-alive
	}
	if s.done {
		s.fail(ErrStreamError) // an event after the terminal one
		return
	}
	v, err := s.parser.ParseBytes(data)
	if err != nil {
		s.fail(ErrStreamError)
		return
	}
	typ := v.GetStringBytes("type")
	if len(typ) == 0 {
		typ = ev.Name
	}
	switch {
	case bytes.Equal(typ, evError), bytes.Equal(typ, evResponseFailed), v.Get("error") != nil && v.Get("error").Type() != fastjson.TypeNull:
		s.fail(ErrStreamError)
	case bytes.Equal(typ, evResponseCompleted), bytes.Equal(typ, evResponseIncomplete):
		s.done = true
		r := v.Get("response")
		a, err := responseAnswer(r)
		if err != nil {
			s.fail(err)
			return
		}
		s.answer = a
	}
}

// responseStreamToJSON is StreamToJSON for a Responses stream: the response
// object of its terminal event.
func responseStreamToJSON(body []byte) ([]byte, error) {
	sr := NewSSEReader(bytes.NewReader(body))
	var final []byte
	for {
		ev, err := sr.Next()
		if err != nil {
			break
		}
		typ := ev.Name
		if len(typ) == 0 {
			typ = peekType(ev.Data)
		}
		switch {
		case bytes.Equal(typ, evError), bytes.Equal(typ, evResponseFailed):
			return nil, ErrStreamError
		case bytes.Equal(typ, evResponseCompleted), bytes.Equal(typ, evResponseIncomplete):
			v, err := fastjson.ParseBytes(ev.Data)
			if err != nil || v.Get("response") == nil || v.Get("response").Type() != fastjson.TypeObject {
				return nil, ErrStreamError
			}
			final = AppendJSONValue(nil, v.Get("response"))
		}
	}
	if final == nil {
		return nil, ErrStreamIncomplete
	}
	return final, nil
}

// checkResponseObject reports ErrMalformedAnswer unless body is a response
// object: a JSON object with an output array and no error. It never quotes
// the body.
func checkResponseObject(body []byte) error {
	return checkAnswerObject(body, func(v *fastjson.Value) error {
		switch {
		case v.Get("error") != nil && v.Get("error").Type() != fastjson.TypeNull:
			return fmt.Errorf("%w: a 2xx answer with an error object", ErrMalformedAnswer)
		case v.Get("output") == nil || v.Get("output").Type() != fastjson.TypeArray:
			return fmt.Errorf("%w: a 2xx answer to /responses with no output array", ErrMalformedAnswer)
		}
		return nil
	})
}
