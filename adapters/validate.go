package adapters

import (
	"strconv"

	"github.com/valyala/fastjson"
)

// The validators of a request's fields, each naming the param it
// refuses (see Request.validate).

// modelName reads the model field: a non-empty string.
func modelName(v *fastjson.Value) (string, *APIError) {
	s, err := v.StringBytes()
	if err != nil || len(s) == 0 {
		return "", BadRequest("model", "model must be a non-empty string")
	}
	return string(s), nil
}

// pick returns the constant among names that equals k, without allocating.
func pick(k []byte, names ...string) string {
	for _, n := range names {
		if string(k) == n {
			return n
		}
	}
	return string(k)
}

func typeErr(param, want string) *APIError {
	return BadRequest(param, param+" must be "+want)
}

func numberIn(v *fastjson.Value, param string, lo, hi float64) (float64, *APIError) {
	if v.Type() != fastjson.TypeNumber {
		return 0, typeErr(param, "a number")
	}
	f, _ := v.Float64()
	if f < lo || f > hi {
		return 0, BadRequest(param, param+" must be between "+fmtNum(lo)+" and "+fmtNum(hi)+", got "+fmtNum(f))
	}
	return f, nil
}

func intIn(v *fastjson.Value, param string, lo, hi int) (int, *APIError) {
	if v.Type() != fastjson.TypeNumber {
		return 0, typeErr(param, "an integer")
	}
	n, err := v.Int()
	if err != nil {
		f, ferr := v.Float64()
		if ferr != nil || f != float64(int(f)) {
			return 0, typeErr(param, "an integer")
		}
		n = int(f)
	}
	if n < lo || n > hi {
		return 0, BadRequest(param, param+" must be between "+strconv.Itoa(lo)+" and "+strconv.Itoa(hi)+", got "+strconv.Itoa(n))
	}
	return n, nil
}

func fmtNum(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }

func (r *Request) validateStreamOptions(v *fastjson.Value) *APIError {
	if v.Type() == fastjson.TypeNull {
		return nil
	}
	o, err := v.Object()
	if err != nil {
		return typeErr("stream_options", "an object")
	}
	if iu := o.Get("include_usage"); iu != nil {
		b, err := iu.Bool()
		if err != nil {
			return typeErr("stream_options.include_usage", "a boolean")
		}
		r.IncludeUsage = b
	}
	return nil
}

var validRoles = map[string]bool{"system": true, "developer": true, "user": true, "assistant": true, "tool": true, "function": true}

func (r *Request) validateMessages(v *fastjson.Value) *APIError {
	msgs, err := v.Array()
	if err != nil || len(msgs) == 0 {
		return BadRequest("messages", "messages must be a non-empty array")
	}
	if len(msgs) > r.lim.MaxMessages {
		return tooMany("messages", r.lim.MaxMessages)
	}
	// Parameter paths are built only for an error: valid requests, the
	// hot path, allocate nothing here.
	param := func(i int, field string) string { return "messages[" + strconv.Itoa(i) + "]" + field }
	for i, m := range msgs {
		if m.Type() != fastjson.TypeObject {
			return BadRequest(param(i, ""), param(i, "")+" must be an object")
		}
		roleV := m.Get("role")
		if roleV == nil {
			return BadRequest(param(i, ".role"), param(i, ".role")+" is required")
		}
		role, err := roleV.StringBytes()
		if err != nil {
			return typeErr(param(i, ".role"), "a string")
		}
		if !validRoles[string(role)] {
			return BadRequest(param(i, ".role"), "invalid role "+strconv.Quote(string(role))+": expected system, developer, user, assistant or tool")
		}
		if name := m.Get("name"); name != nil && name.Type() != fastjson.TypeString {
			return typeErr(param(i, ".name"), "a string")
		}
		hasToolCalls := false
		if tc := m.Get("tool_calls"); tc != nil && tc.Type() != fastjson.TypeNull {
			if string(role) != "assistant" {
				return BadRequest(param(i, ".tool_calls"), "tool_calls is only allowed on assistant messages")
			}
			if e := validateToolCalls(tc, param(i, ".tool_calls")); e != nil {
				return e
			}
			hasToolCalls = len(tc.GetArray()) > 0
		}
		content := m.Get("content")
		contentMissing := content == nil || content.Type() == fastjson.TypeNull
		switch {
		case contentMissing && string(role) == "assistant" && (hasToolCalls || m.Get("function_call") != nil):
		case contentMissing:
			return BadRequest(param(i, ".content"), param(i, ".content")+" is required")
		case content.Type() == fastjson.TypeString:
		default:
			if e := r.validateContent(content, param(i, ".content")); e != nil {
				return e
			}
		}
		if string(role) == "tool" {
			id := m.Get("tool_call_id")
			if id == nil || id.Type() != fastjson.TypeString {
				return BadRequest(param(i, ".tool_call_id"), "tool messages need a string tool_call_id")
			}
		}
	}
	return nil
}

func (r *Request) validateContent(c *fastjson.Value, param string) *APIError {
	switch c.Type() {
	case fastjson.TypeString:
		return nil
	case fastjson.TypeArray:
		parts := c.GetArray()
		if len(parts) > r.lim.MaxContentParts {
			return tooMany(param, r.lim.MaxContentParts)
		}
		for i, part := range parts {
			pp := param + "[" + strconv.Itoa(i) + "]"
			t := part.GetStringBytes("type")
			if part.Type() != fastjson.TypeObject || t == nil {
				return BadRequest(pp, pp+" must be an object with a string type")
			}
			switch string(t) {
			case "text":
				if part.Get("text") == nil || part.Get("text").Type() != fastjson.TypeString {
					return BadRequest(pp+".text", pp+".text must be a string")
				}
			case "image_url", "input_audio", "file", "video_url", "audio_url", "input_image":
				r.Multimodal = true
			case "refusal":
			default:
				return BadRequest(pp+".type", "unknown content part type "+strconv.Quote(string(t)))
			}
		}
		return nil
	default:
		return BadRequest(param, param+" must be a string or an array of content parts")
	}
}

func validateToolCalls(v *fastjson.Value, param string) *APIError {
	calls, err := v.Array()
	if err != nil {
		return typeErr(param, "an array")
	}
	for i, c := range calls {
		pp := param + "[" + strconv.Itoa(i) + "]"
		if c.Type() != fastjson.TypeObject {
			return typeErr(pp, "an object")
		}
		fn := c.Get("function")
		if fn == nil || fn.Type() != fastjson.TypeObject || len(fn.GetStringBytes("name")) == 0 {
			return BadRequest(pp+".function", pp+".function must be an object with a name")
		}
	}
	return nil
}

// validatePrompt checks a completion's prompt: a string, or an array of
// strings, token ids or token arrays, each array of at most
// lim.MaxTokenIDs items.
func validatePrompt(v *fastjson.Value, lim BodyLimits) *APIError {
	switch v.Type() {
	case fastjson.TypeString:
		return nil
	case fastjson.TypeArray:
		items := v.GetArray()
		if len(items) == 0 {
			return BadRequest("prompt", "prompt must not be empty")
		}
		if len(items) > lim.MaxTokenIDs {
			return tooMany("prompt", lim.MaxTokenIDs)
		}
		for i, it := range items {
			switch it.Type() {
			case fastjson.TypeString, fastjson.TypeNumber:
			case fastjson.TypeArray:
				toks := it.GetArray()
				if len(toks) > lim.MaxTokenIDs {
					return tooMany("prompt["+strconv.Itoa(i)+"]", lim.MaxTokenIDs)
				}
				for _, tok := range toks {
					if tok.Type() != fastjson.TypeNumber {
						return BadRequest("prompt", "token arrays in prompt must hold integers")
					}
				}
			default:
				return BadRequest("prompt", "prompt must be a string, an array of strings or an array of token arrays")
			}
		}
		return nil
	default:
		return BadRequest("prompt", "prompt must be a string, an array of strings or an array of token arrays")
	}
}

func validateStop(v *fastjson.Value) *APIError {
	switch v.Type() {
	case fastjson.TypeNull, fastjson.TypeString:
		return nil
	case fastjson.TypeArray:
		for _, s := range v.GetArray() {
			if s.Type() != fastjson.TypeString {
				return BadRequest("stop", "stop must be a string or an array of strings")
			}
		}
		return nil
	default:
		return BadRequest("stop", "stop must be a string or an array of strings")
	}
}

func validateLogitBias(v *fastjson.Value) *APIError {
	if v.Type() == fastjson.TypeNull {
		return nil
	}
	o, err := v.Object()
	if err != nil {
		return typeErr("logit_bias", "an object mapping token ids to numbers")
	}
	var apiErr *APIError
	o.Visit(func(_ []byte, b *fastjson.Value) {
		if apiErr == nil {
			_, apiErr = numberIn(b, "logit_bias", -100, 100)
		}
	})
	return apiErr
}

func validateTools(v *fastjson.Value) *APIError {
	tools, err := v.Array()
	if err != nil {
		return typeErr("tools", "an array")
	}
	for i, t := range tools {
		param := "tools[" + strconv.Itoa(i) + "]"
		if t.Type() != fastjson.TypeObject {
			return typeErr(param, "an object")
		}
		if typ := t.GetStringBytes("type"); string(typ) != "function" {
			return BadRequest(param+".type", param+".type must be \"function\"")
		}
		fn := t.Get("function")
		if fn == nil || fn.Type() != fastjson.TypeObject || len(fn.GetStringBytes("name")) == 0 {
			return BadRequest(param+".function.name", param+".function.name is required")
		}
	}
	return nil
}

func validateToolChoice(v *fastjson.Value) *APIError {
	switch v.Type() {
	case fastjson.TypeNull:
		return nil
	case fastjson.TypeString:
		switch string(v.GetStringBytes()) {
		case "none", "auto", "required":
			return nil
		}
		return BadRequest("tool_choice", `tool_choice must be "none", "auto", "required" or an object naming a function`)
	case fastjson.TypeObject:
		if len(v.GetStringBytes("function", "name")) == 0 {
			return BadRequest("tool_choice", "tool_choice.function.name is required")
		}
		return nil
	default:
		return BadRequest("tool_choice", `tool_choice must be "none", "auto", "required" or an object naming a function`)
	}
}

func validateResponseFormat(v *fastjson.Value) *APIError {
	if v.Type() == fastjson.TypeNull {
		return nil
	}
	if v.Type() != fastjson.TypeObject {
		return typeErr("response_format", "an object")
	}
	switch string(v.GetStringBytes("type")) {
	case "text", "json_object":
		return nil
	case "json_schema":
		if js := v.Get("json_schema"); js == nil || js.Type() != fastjson.TypeObject {
			return BadRequest("response_format.json_schema", "response_format.json_schema must be an object")
		}
		return nil
	default:
		return BadRequest("response_format.type", `response_format.type must be "text", "json_object" or "json_schema"`)
	}
}
