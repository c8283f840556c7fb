package adapters

import (
	"strconv"

	"github.com/go-json-experiment/json/jsontext"
	"github.com/valyala/fastjson"
)

// Endpoint says which OpenAI endpoint a request was sent to.
type Endpoint uint8

// Endpoints served by the gateway.
const (
	EndpointChat        Endpoint = iota // POST /v1/chat/completions
	EndpointCompletion                  // POST /v1/completions
	EndpointResponses                   // POST /v1/responses
	EndpointEmbeddings                  // POST /v1/embeddings
	EndpointPassthrough                 // a path of passthrough.paths, forwarded as it came (UpstreamRequest.Path)
	NumEndpoints                        // how many endpoints there are, for arrays indexed by Endpoint
)

// Path is the upstream path for the endpoint, relative to a /v1 base URL
// ("" for EndpointPassthrough: the request carries its own).
func (e Endpoint) Path() string {
	switch e {
	case EndpointCompletion:
		return "/completions"
	case EndpointResponses:
		return "/responses"
	case EndpointEmbeddings:
		return "/embeddings"
	case EndpointPassthrough:
		return ""
	}
	return "/chat/completions"
}

// Request is a validated client request. The original body is kept (and
// forwarded as is unless something must be rewritten); the parsed tree
// stays valid until Release.
type Request struct {
	Endpoint Endpoint
	Body     []byte // the client's body, as received: the caller's buffer, not copied

	Model          string
	Stream         bool
	IncludeUsage   bool // stream_options.include_usage
	MaxTokens      int  // max_tokens or max_completion_tokens; 0 when absent
	N              int  // 1 when absent
	Temperature    float64
	HasTemperature bool
	Multimodal     bool // image, audio, video or file parts present
	HasTools       bool

	// The Responses API's state (EndpointResponses only): a request that
	// continues a stored response, asks to be stored (store is true unless
	// it says false) or runs in the background.
	PreviousResponseID string
	StoreOff           bool // "store": false
	Background         bool
	ServerState        bool // a conversation, a stored prompt template or an item_reference
	// StateRefs are the ids of the server-side state the request names
	// besides PreviousResponseID, in the order they appear: the gateway
	// must own each for the tenant before a node sees the request.
	StateRefs []StateRef

	rewritten bool             // the tree differs from Body: UpstreamBody encodes it
	held      *fastjson.Parser // holds values grafted into the tree (Continue)

	lim BodyLimits
	parsedBody
}

var parserPool fastjson.ParserPool

// Root returns the parsed JSON object. It is valid until Release.
func (r *Request) Root() *fastjson.Value { return r.root }

// Release returns the parser to its pool (a small one) and the parse cost
// to its gate. The request must not be used after.
func (r *Request) Release() {
	if r.parser != nil {
		r.release()
		r.Body = nil
	}
}

// ParseRequest parses and validates an OpenAI chat, completion or
// Responses API request.
// Body aliases the caller's buffer, which must outlive the Request's use of
// Body (the gateway forwards it within the handler); the parsed tree is the
// parser's own copy and lives until Release.
func ParseRequest(ep Endpoint, body []byte) (*Request, *APIError) {
	return ParseRequestWith(ep, body, ParseOptions{})
}

// ParseRequestWith is ParseRequest within opt's bounds, the parse admitted
// by opt.Gate.
func ParseRequestWith(ep Endpoint, body []byte, opt ParseOptions) (*Request, *APIError) {
	// One reading of the body: the cache reads it with fastjson, which
	// takes the first of duplicate keys, keeps a lone surrogate escape as
	// its six characters and lets invalid UTF-8 through, while the engines
	// (Python, Go's encoding/json) take the last key and decode or refuse
	// the rest. So the body must be I-JSON (RFC 7493): valid UTF-8, escapes
	// that are Unicode scalar values, and unique keys at every depth, which
	// jsontext checks in one pass. It is also stricter than fastjson's
	// parser, which accepts a lone "." as a number: nothing invalid is ever
	// forwarded.
	pb, apiErr := parseBody(ep, body, opt)
	if apiErr != nil {
		return nil, apiErr
	}
	r := &Request{Endpoint: ep, parsedBody: pb, lim: opt.Limits.orDefaults(), N: 1}
	if apiErr := r.validate(); apiErr != nil {
		r.Release()
		return nil, apiErr
	}
	r.Body = body
	return r, nil
}

// parsedBody is a parsed request body: the tree, the parser holding it,
// and the parse's cost, given back to its gate on release.
type parsedBody struct {
	root   *fastjson.Value
	parser *fastjson.Parser
	cost   int64
	gate   ParseGate
}

// release returns a small parse's parser to parserPool (a large one is
// dropped, with the memory it holds) and the cost to the gate.
func (p *parsedBody) release() {
	if p.parser == nil {
		return
	}
	if p.cost <= maxPooledCost {
		parserPool.Put(p.parser)
	}
	if p.gate != nil {
		p.gate.ReleaseParse(p.cost)
	}
	*p = parsedBody{}
}

// parseBody checks that body is I-JSON (see ParseRequest) and within
// opt's bounds for ep, has opt.Gate admit its cost, and parses it. The
// caller releases the result.
func parseBody(ep Endpoint, body []byte, opt ParseOptions) (parsedBody, *APIError) {
	if !jsontext.Value(body).IsValid() {
		return parsedBody{}, invalidBody(body)
	}
	shape, apiErr := scanBody(ep, body, opt.Limits.orDefaults())
	if apiErr != nil {
		return parsedBody{}, apiErr
	}
	pb := parsedBody{cost: shape.cost(len(body))}
	if opt.Gate != nil {
		if apiErr := opt.Gate.AcquireParse(pb.cost); apiErr != nil {
			return parsedBody{}, apiErr
		}
		pb.gate = opt.Gate
	}
	if pb.cost <= maxPooledCost {
		pb.parser = parserPool.Get()
	} else {
		pb.parser = new(fastjson.Parser) // dropped on release
	}
	root, err := pb.parser.ParseBytes(body)
	if err != nil {
		pb.release()
		return parsedBody{}, BadRequest("", "invalid JSON body: "+err.Error())
	}
	pb.root = root
	return pb, nil
}

func (r *Request) validate() *APIError {
	obj, err := r.root.Object()
	if err != nil {
		return BadRequest("", "request body must be a JSON object")
	}
	var apiErr *APIError
	sawModel, sawInput := false, false
	obj.Visit(func(k []byte, v *fastjson.Value) {
		if apiErr != nil {
			return
		}
		if r.Endpoint == EndpointResponses {
			var handled bool
			if handled, apiErr = r.responsesField(k, v); handled {
				sawInput = sawInput || string(k) == "input"
				return
			}
		}
		// No variable holds string(k): one would escape and allocate for
		// every key of every request.
		switch string(k) {
		case "model":
			sawModel = true
			r.Model, apiErr = modelName(v)
		case "messages":
			if r.Endpoint != EndpointChat {
				return // unknown to completions: forwarded untouched
			}
			sawInput = true
			apiErr = r.validateMessages(v)
		case "prompt":
			if r.Endpoint != EndpointCompletion {
				return
			}
			sawInput = true
			apiErr = validatePrompt(v, r.lim)
		case "stream":
			b, e := v.Bool()
			if e != nil {
				apiErr = typeErr("stream", "a boolean")
			}
			r.Stream = b
		case "stream_options":
			apiErr = r.validateStreamOptions(v)
		case "temperature":
			r.Temperature, apiErr = numberIn(v, "temperature", 0, 2)
			r.HasTemperature = apiErr == nil
		case "top_p", "min_p":
			_, apiErr = numberIn(v, pick(k, "top_p", "min_p"), 0, 1)
		case "presence_penalty", "frequency_penalty":
			_, apiErr = numberIn(v, pick(k, "presence_penalty", "frequency_penalty"), -2, 2)
		case "repetition_penalty":
			_, apiErr = numberIn(v, "repetition_penalty", 0.01, 100)
		case "max_tokens", "max_completion_tokens":
			if v.Type() == fastjson.TypeNull {
				return
			}
			var n int
			n, apiErr = intIn(v, pick(k, "max_tokens", "max_completion_tokens"), 1, 1<<30)
			if apiErr == nil && (r.MaxTokens == 0 || n < r.MaxTokens) {
				r.MaxTokens = n
			}
		case "n":
			r.N, apiErr = intIn(v, "n", 1, 128)
		case "best_of":
			_, apiErr = intIn(v, "best_of", 1, 128)
		case "top_k":
			_, apiErr = intIn(v, "top_k", -1, 1<<20)
		case "seed":
			if v.Type() != fastjson.TypeNull {
				_, apiErr = intIn(v, "seed", -1<<62, 1<<62)
			}
		case "logprobs":
			if r.Endpoint == EndpointChat {
				if _, e := v.Bool(); e != nil && v.Type() != fastjson.TypeNull {
					apiErr = typeErr("logprobs", "a boolean")
				}
			} else if v.Type() != fastjson.TypeNull {
				_, apiErr = intIn(v, "logprobs", 0, 20)
			}
		case "top_logprobs":
			if v.Type() != fastjson.TypeNull {
				_, apiErr = intIn(v, "top_logprobs", 0, 20)
			}
		case "stop":
			apiErr = validateStop(v)
		case "logit_bias":
			apiErr = validateLogitBias(v)
		case "user":
			if v.Type() != fastjson.TypeString {
				apiErr = typeErr("user", "a string")
			}
		case "enable_thinking", "echo", "parallel_tool_calls", "store":
			if _, e := v.Bool(); e != nil {
				apiErr = typeErr(string(k), "a boolean")
			}
		case "tools":
			apiErr = validateTools(v)
			r.HasTools = apiErr == nil && len(v.GetArray()) > 0
		case "tool_choice":
			apiErr = validateToolChoice(v)
		case "response_format":
			apiErr = validateResponseFormat(v)
		}
	})
	if apiErr != nil {
		return apiErr
	}
	if !sawModel {
		return BadRequest("model", "you must provide a model parameter")
	}
	if !sawInput {
		switch r.Endpoint {
		case EndpointChat:
			if r.root.Get("prompt") != nil {
				return BadRequest("messages", "messages is required and must be a non-empty array; a body with prompt is a completions request: send it to /v1/completions")
			}
			return BadRequest("messages", "messages is required and must be a non-empty array")
		case EndpointResponses:
			return BadRequest("input", "input is required: a string or an array of input items")
		}
		if r.root.Get("messages") != nil {
			return BadRequest("prompt", "prompt is required; a body with messages is a chat request: send it to /v1/chat/completions")
		}
		return BadRequest("prompt", "prompt is required")
	}
	return nil
}

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
