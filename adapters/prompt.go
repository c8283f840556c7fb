package adapters

import (
	"hash/fnv"

	"github.com/valyala/fastjson"
)

// The prompt as the gateway reads it for token estimates, node affinity and
// prefix scoring, and the body sent upstream when something must change.

// PromptText returns the text the model reads: every message's text content
// (chat) or the prompt strings (completions), joined with newlines. It is
// what token estimates count.
func (r *Request) PromptText() string {
	var b []byte
	add := func(s []byte) {
		if len(b) > 0 {
			b = append(b, '\n')
		}
		b = append(b, s...)
	}
	if r.Endpoint == EndpointCompletion {
		p := r.root.Get("prompt")
		if p.Type() == fastjson.TypeString {
			add(p.GetStringBytes())
		}
		for _, it := range p.GetArray() {
			add(it.GetStringBytes())
		}
		return string(b)
	}
	for _, m := range r.root.GetArray("messages") {
		c := m.Get("content")
		if c == nil {
			continue
		}
		if c.Type() == fastjson.TypeString {
			add(c.GetStringBytes())
			continue
		}
		for _, part := range c.GetArray() {
			if t := part.GetStringBytes("text"); len(t) > 0 {
				add(t)
			}
		}
	}
	return string(b)
}

// SystemPromptHash is a hash of the system prompt's content: requests that
// share one go to the node whose prefix cache may already hold it. 0 when
// the first message is not a system prompt.
func (r *Request) SystemPromptHash() uint64 {
	msgs := r.root.GetArray("messages")
	if len(msgs) == 0 || string(msgs[0].GetStringBytes("role")) != "system" {
		return 0
	}
	h := fnv.New64a()
	_, _ = h.Write(msgs[0].GetStringBytes("content"))
	return h.Sum64() | 1
}

// WalkPrompt passes the prompt in order to message (each message's role;
// nil once for a completion's prompt) and text (its text content).
func (r *Request) WalkPrompt(message func(role []byte), text func([]byte)) {
	if r.Endpoint == EndpointCompletion {
		message(nil)
		if p := r.root.Get("prompt"); p != nil && p.Type() == fastjson.TypeString {
			text(p.GetStringBytes())
		} else {
			for _, it := range p.GetArray() {
				text(it.GetStringBytes())
			}
		}
		return
	}
	for _, m := range r.root.GetArray("messages") {
		message(m.GetStringBytes("role"))
		c := m.Get("content")
		if c != nil && c.Type() == fastjson.TypeString {
			text(c.GetStringBytes())
			continue
		}
		for _, part := range c.GetArray() {
			text(part.GetStringBytes("text"))
		}
	}
}

// UpstreamBody is the body to send upstream for model: the client's bytes
// as they came when nothing changes, else the request re-encoded with the
// model name and, for a stream that did not ask for it, the usage chunk
// (which the gateway needs to settle and cache; it strips the chunk again
// for such a client). It modifies the parse tree.
func (r *Request) UpstreamBody(model string) []byte {
	wantUsage := r.Stream && !r.IncludeUsage
	if !wantUsage && model == r.Model {
		return r.Body
	}
	var arena fastjson.Arena
	if model != r.Model {
		r.root.Set("model", arena.NewString(model))
	}
	if wantUsage {
		so := r.root.Get("stream_options")
		if so == nil || so.Type() != fastjson.TypeObject {
			so = arena.NewObject()
			r.root.Set("stream_options", so)
		}
		so.Set("include_usage", arena.NewTrue())
	}
	return AppendJSONValue(nil, r.root)
}
