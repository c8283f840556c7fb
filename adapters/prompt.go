package adapters

import (
	"bytes"
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
	if r.Endpoint == EndpointResponses {
		r.walkInput(func([]byte) {}, add)
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
	if r.Endpoint == EndpointResponses {
		return r.instructionsHash()
	}
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
	if r.Endpoint == EndpointResponses {
		r.walkInput(message, text)
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

// walkInput passes a Responses request's prompt in order to message and
// text: the instructions (as a system message), then each input item (a
// string input is one user message). Besides message content, a function
// call's arguments and a tool's output are text the model reads.
func (r *Request) walkInput(message func(role []byte), text func([]byte)) {
	if in := r.root.Get("instructions"); in != nil && in.Type() == fastjson.TypeString {
		message(roleSystem)
		text(in.GetStringBytes())
	}
	in := r.root.Get("input")
	if in != nil && in.Type() == fastjson.TypeString {
		message(roleUser)
		text(in.GetStringBytes())
		return
	}
	for _, it := range in.GetArray() {
		role := it.GetStringBytes("role")
		if role == nil {
			role = it.GetStringBytes("type")
		}
		message(role)
		if c := it.Get("content"); c != nil && c.Type() == fastjson.TypeString {
			text(c.GetStringBytes())
		} else {
			for _, part := range c.GetArray() {
				if t := part.GetStringBytes("text"); len(t) > 0 {
					text(t)
				}
			}
		}
		for _, field := range [...]string{"arguments", "output"} {
			if s := it.GetStringBytes(field); len(s) > 0 {
				text(s)
			}
		}
	}
}

var (
	roleSystem = []byte("system")
	roleUser   = []byte("user")
)

// instructionsHash is SystemPromptHash for a Responses request: the
// instructions, or else a leading system or developer message's text.
func (r *Request) instructionsHash() uint64 {
	var s []byte
	if in := r.root.Get("instructions"); in != nil && in.Type() == fastjson.TypeString {
		s = in.GetStringBytes()
	} else if items := r.root.GetArray("input"); len(items) > 0 {
		switch string(items[0].GetStringBytes("role")) {
		case "system", "developer":
			s = items[0].GetStringBytes("content")
		}
	}
	if len(s) == 0 {
		return 0
	}
	h := fnv.New64a()
	_, _ = h.Write(s)
	return h.Sum64() | 1
}

// UpstreamBody is the body to send upstream for model: the client's bytes
// as they came when nothing changes, else the request re-encoded with the
// model name and, for a stream that did not ask for it, the usage chunk
// (which the gateway needs to settle and cache; it strips the chunk again
// for such a client). It modifies the parse tree.
func (r *Request) UpstreamBody(model string) []byte {
	// A Responses stream ends with response.completed, which carries the
	// usage: nothing to ask for.
	wantUsage := r.Stream && !r.IncludeUsage && r.Endpoint != EndpointResponses
	if !wantUsage && model == r.Model && !r.rewritten {
		return r.Body
	}
	if wantUsage && model == r.Model && !r.rewritten && r.root.Get("stream_options") == nil {
		if b := appendMember(make([]byte, 0, len(r.Body)+1+len(includeUsageMember)), r.Body, includeUsageMember); b != nil {
			return b
		}
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

// includeUsageMember asks a node for the usage chunk of a stream.
const includeUsageMember = `"stream_options":{"include_usage":true}`

// appendMember appends to dst the JSON object obj with member added last:
// the client's bytes as they came, the member spliced in before the
// closing brace, so that asking for the usage chunk needs no re-encoding.
// obj must be a valid JSON object without that member's key; nil when it
// has no member to follow.
func appendMember(dst, obj []byte, member string) []byte {
	end := bytes.LastIndexByte(obj, '}')
	if end < 0 {
		return nil
	}
	body := bytes.TrimRight(obj[:end], " \t\r\n")
	if len(body) == 0 || body[len(body)-1] == '{' {
		return nil // an empty object: no comma
	}
	dst = append(dst, body...)
	dst = append(dst, ',')
	dst = append(dst, member...)
	return append(dst, obj[end:]...)
}
