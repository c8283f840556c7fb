package adapters

import (
	"fmt"
	"strconv"

	"github.com/valyala/fastjson"
)

// The Responses API's request fields (POST /v1/responses). ParseRequest
// reads a Responses request with the same one strict pass as a chat one;
// responsesField takes the fields whose meaning differs from chat's, and
// the rest (temperature, top_p, user, stream, ...) are checked as for chat.

// responsesField validates one top-level field of a Responses request. It
// reports whether the field is one of the Responses API's own.
func (r *Request) responsesField(k []byte, v *fastjson.Value) (bool, *APIError) {
	switch string(k) {
	case "input":
		return true, r.validateInput(v)
	case "instructions":
		if v.Type() != fastjson.TypeString && v.Type() != fastjson.TypeNull {
			return true, typeErr("instructions", "a string")
		}
	case "previous_response_id":
		switch v.Type() {
		case fastjson.TypeNull:
		case fastjson.TypeString:
			if len(v.GetStringBytes()) == 0 {
				return true, BadRequest("previous_response_id", "previous_response_id must be a non-empty string")
			}
			r.PreviousResponseID = string(v.GetStringBytes())
		default:
			return true, typeErr("previous_response_id", "a string")
		}
	case "store":
		if v.Type() != fastjson.TypeNull {
			b, err := v.Bool()
			if err != nil {
				return true, typeErr("store", "a boolean")
			}
			r.StoreOff = !b
		}
	case "background":
		if v.Type() != fastjson.TypeNull {
			b, err := v.Bool()
			if err != nil {
				return true, typeErr("background", "a boolean")
			}
			r.Background = b
		}
	case "conversation", "prompt":
		// A conversation object, or a prompt template stored on the
		// server: the answer depends on state the request does not carry.
		switch v.Type() {
		case fastjson.TypeNull:
		case fastjson.TypeString, fastjson.TypeObject:
			r.ServerState = true
			r.StateRefs = append(r.StateRefs, StateRef{Kind: StateKind(k), Param: string(k), ID: stateID(v)})
		default:
			return true, typeErr(pick(k, "conversation", "prompt"), "a string or an object")
		}
	case "max_output_tokens":
		if v.Type() != fastjson.TypeNull {
			n, apiErr := intIn(v, "max_output_tokens", 1, 1<<30)
			if apiErr != nil {
				return true, apiErr
			}
			r.MaxTokens = n
		}
	case "tools":
		return true, r.validateResponsesTools(v)
	case "tool_choice":
		switch v.Type() {
		case fastjson.TypeNull, fastjson.TypeObject:
			if v.Type() == fastjson.TypeObject && len(v.GetStringBytes("type")) == 0 {
				return true, BadRequest("tool_choice", "tool_choice.type must be a string")
			}
		case fastjson.TypeString:
			switch string(v.GetStringBytes()) {
			case "none", "auto", "required":
			default:
				return true, BadRequest("tool_choice", `tool_choice must be "none", "auto", "required" or an object`)
			}
		default:
			return true, BadRequest("tool_choice", `tool_choice must be "none", "auto", "required" or an object`)
		}
	case "text", "reasoning", "metadata":
		if v.Type() != fastjson.TypeObject && v.Type() != fastjson.TypeNull {
			return true, typeErr(pick(k, "text", "reasoning", "metadata"), "an object")
		}
	case "include":
		if v.Type() == fastjson.TypeNull {
			return true, nil
		}
		items, err := v.Array()
		if err != nil {
			return true, typeErr("include", "an array of strings")
		}
		for _, it := range items {
			if it.Type() != fastjson.TypeString {
				return true, typeErr("include", "an array of strings")
			}
		}
	case "truncation":
		switch v.Type() {
		case fastjson.TypeNull:
		case fastjson.TypeString:
			if s := string(v.GetStringBytes()); s != "auto" && s != "disabled" {
				return true, BadRequest("truncation", `truncation must be "auto" or "disabled"`)
			}
		default:
			return true, BadRequest("truncation", `truncation must be "auto" or "disabled"`)
		}
	default:
		return false, nil
	}
	return true, nil
}

// StateKind names a kind of state a Responses request can refer to by id.
type StateKind string

// The kinds of server-side state besides a previous response.
const (
	StateConversation StateKind = "conversation"   // "conversation": an id or {"id": ...}
	StatePrompt       StateKind = "prompt"         // "prompt": a stored template, {"id": ...}
	StateItem         StateKind = "item_reference" // an input item {"type":"item_reference","id": ...}
)

// StateRef is one reference of a request to state kept on a server.
type StateRef struct {
	Kind  StateKind
	Param string // where it stands in the request: "conversation", "input[2].id"
	ID    string // the id named; "" when the reference names none
}

// stateID is the id a state reference names: the string itself, or an
// object's "id".
func stateID(v *fastjson.Value) string {
	if v.Type() == fastjson.TypeString {
		return string(v.GetStringBytes())
	}
	return string(v.GetStringBytes("id"))
}

var inputRoles = map[string]bool{"user": true, "assistant": true, "system": true, "developer": true}

// validateInput checks input: a string, or a non-empty array of items.
// Messages ({"role","content"}, with or without "type":"message") are
// checked to their content parts; other items (function_call,
// function_call_output, reasoning, ...) need a string type.
func (r *Request) validateInput(v *fastjson.Value) *APIError {
	if v.Type() == fastjson.TypeString {
		return nil
	}
	items, err := v.Array()
	if err != nil || len(items) == 0 {
		return BadRequest("input", "input must be a string or a non-empty array of input items")
	}
	if len(items) > r.lim.MaxMessages {
		return tooMany("input", r.lim.MaxMessages)
	}
	param := func(i int, field string) string { return "input[" + strconv.Itoa(i) + "]" + field }
	for i, it := range items {
		if it.Type() != fastjson.TypeObject {
			return BadRequest(param(i, ""), param(i, "")+" must be an object")
		}
		typ := it.Get("type")
		if typ != nil && typ.Type() != fastjson.TypeString {
			return typeErr(param(i, ".type"), "a string")
		}
		switch t := string(typ.GetStringBytes()); {
		case t == "item_reference":
			r.ServerState = true // an item stored on the server
			r.StateRefs = append(r.StateRefs, StateRef{Kind: StateItem, Param: param(i, ".id"), ID: stateID(it)})
			continue
		case typ != nil && t != "message":
			if t == "" {
				return BadRequest(param(i, ".type"), param(i, ".type")+" must be a non-empty string")
			}
			continue
		}
		role := it.Get("role")
		if role == nil || role.Type() != fastjson.TypeString {
			return BadRequest(param(i, ".role"), param(i, ".role")+" is required and must be a string")
		}
		if !inputRoles[string(role.GetStringBytes())] {
			return BadRequest(param(i, ".role"), "invalid role "+strconv.Quote(string(role.GetStringBytes()))+
				": expected user, assistant, system or developer")
		}
		c := it.Get("content")
		switch {
		case c == nil || c.Type() == fastjson.TypeNull:
			return BadRequest(param(i, ".content"), param(i, ".content")+" is required")
		case c.Type() == fastjson.TypeString:
		case c.Type() == fastjson.TypeArray:
			if e := r.validateInputParts(c, param(i, ".content")); e != nil {
				return e
			}
		default:
			return BadRequest(param(i, ".content"), param(i, ".content")+" must be a string or an array of content parts")
		}
	}
	return nil
}

func (r *Request) validateInputParts(c *fastjson.Value, param string) *APIError {
	parts := c.GetArray()
	if len(parts) > r.lim.MaxContentParts {
		return tooMany(param, r.lim.MaxContentParts)
	}
	for j, part := range parts {
		pp := param + "[" + strconv.Itoa(j) + "]"
		t := part.GetStringBytes("type")
		if part.Type() != fastjson.TypeObject || t == nil {
			return BadRequest(pp, pp+" must be an object with a string type")
		}
		switch string(t) {
		case "input_text", "output_text", "summary_text", "reasoning_text":
			if tv := part.Get("text"); tv == nil || tv.Type() != fastjson.TypeString {
				return BadRequest(pp+".text", pp+".text must be a string")
			}
		case "input_image", "input_file", "input_audio":
			r.Multimodal = true
		case "refusal":
		default:
			return BadRequest(pp+".type", "unknown content part type "+strconv.Quote(string(t)))
		}
	}
	return nil
}

// validateResponsesTools checks the Responses API's tools: objects with a
// string type; a function tool names its function at the top level.
func (r *Request) validateResponsesTools(v *fastjson.Value) *APIError {
	if v.Type() == fastjson.TypeNull {
		return nil
	}
	tools, err := v.Array()
	if err != nil {
		return typeErr("tools", "an array")
	}
	for i, t := range tools {
		param := "tools[" + strconv.Itoa(i) + "]"
		if t.Type() != fastjson.TypeObject {
			return typeErr(param, "an object")
		}
		typ := t.GetStringBytes("type")
		if len(typ) == 0 {
			return BadRequest(param+".type", param+".type must be a non-empty string")
		}
		if string(typ) == "function" && len(t.GetStringBytes("name")) == 0 {
			return BadRequest(param+".name", param+".name is required for a function tool")
		}
	}
	r.HasTools = len(tools) > 0
	return nil
}

// Continue makes a follow-up whose predecessor no node holds (the
// gateway's cache served it) a request of its own: its input becomes the
// predecessor's input (prevInput, a string or an array of items, as JSON),
// the predecessor's answer as an assistant message, then its own input;
// previous_response_id goes. It is what the Responses API does with a
// previous_response_id (the predecessor's instructions do not carry over).
// PreviousResponseID keeps its value: the request is still a follow-up.
func (r *Request) Continue(prevInput []byte, prevOutput string) error {
	p := new(fastjson.Parser)
	prev, err := p.ParseBytes(prevInput)
	if err != nil {
		return fmt.Errorf("continue: the previous input: %w", err)
	}
	var a fastjson.Arena
	items := a.NewArray()
	n := 0
	add := func(v *fastjson.Value) {
		items.SetArrayItem(n, v)
		n++
	}
	message := func(role string, content *fastjson.Value) *fastjson.Value {
		m := a.NewObject()
		m.Set("role", a.NewString(role))
		m.Set("content", content)
		return m
	}
	addInput := func(in *fastjson.Value) {
		if in.Type() == fastjson.TypeString {
			add(message("user", in))
			return
		}
		for _, it := range in.GetArray() {
			add(it)
		}
	}
	addInput(prev)
	add(message("assistant", a.NewString(prevOutput)))
	addInput(r.root.Get("input"))
	r.root.Set("input", items)
	r.root.Del("previous_response_id")
	r.rewritten, r.held = true, p
	return nil
}

// InputJSON is a Responses request's input as JSON (for a follow-up's
// Continue).
func (r *Request) InputJSON() []byte {
	in := r.root.Get("input")
	if in == nil {
		return nil
	}
	return AppendJSONValue(nil, in)
}
