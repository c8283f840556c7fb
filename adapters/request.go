package adapters

import (
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
