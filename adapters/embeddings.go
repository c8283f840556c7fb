package adapters

import (
	"strconv"

	"github.com/valyala/fastjson"
)

// MaxEmbeddingInputs is the most inputs one embeddings request may carry,
// as OpenAI's API allows.
const MaxEmbeddingInputs = 2048

// MaxEmbeddingDimensions bounds the dimensions field.
const MaxEmbeddingDimensions = 1 << 16

// EmbeddingsRequest is a validated POST /v1/embeddings request. Its body
// went through the same strict reading as a chat request (I-JSON: no key
// twice, valid UTF-8, no lone surrogate escape), so the cache and the node
// read the same inputs.
type EmbeddingsRequest struct {
	Body  []byte // the client's body, as received: the caller's buffer
	Model string
	// Inputs are the inputs in order: each a string or an array of token
	// ids. "input": "x" and "input": [1, 2] are one input each. Valid until
	// Release.
	Inputs     []*fastjson.Value
	Base64     bool // encoding_format "base64"; else floats
	Dimensions int  // 0: not asked for

	lim BodyLimits
	parsedBody
}

// Root returns the parsed JSON object. It is valid until Release.
func (r *EmbeddingsRequest) Root() *fastjson.Value { return r.root }

// Release returns the parser to its pool (a small one) and the parse cost
// to its gate. The request must not be used after.
func (r *EmbeddingsRequest) Release() {
	if r.parser != nil {
		r.release()
		r.Body, r.Inputs = nil, nil
	}
}

// InputTokens is the number of tokens of input i when it is an array of
// token ids, or -1 for a string.
func (r *EmbeddingsRequest) InputTokens(i int) int {
	if v := r.Inputs[i]; v.Type() == fastjson.TypeArray {
		return len(v.GetArray())
	}
	return -1
}

// InputText is the text of input i ("" for token ids).
func (r *EmbeddingsRequest) InputText(i int) string {
	return string(r.Inputs[i].GetStringBytes())
}

// ParseEmbeddingsRequest parses and validates an OpenAI embeddings request.
// input is a non-empty string, an array of up to MaxEmbeddingInputs
// non-empty strings, an array of token ids (one input), or an array of
// non-empty arrays of token ids; an array mixing these is refused.
// encoding_format is "float" (the default) or "base64"; dimensions a
// positive integer. Other fields are forwarded untouched.
func ParseEmbeddingsRequest(body []byte) (*EmbeddingsRequest, *APIError) {
	return ParseEmbeddingsRequestWith(body, ParseOptions{})
}

// ParseEmbeddingsRequestWith is ParseEmbeddingsRequest within opt's
// bounds (a token array holds at most Limits.MaxTokenIDs ids), the parse
// admitted by opt.Gate.
func ParseEmbeddingsRequestWith(body []byte, opt ParseOptions) (*EmbeddingsRequest, *APIError) {
	pb, apiErr := parseBody(EndpointEmbeddings, body, opt)
	if apiErr != nil {
		return nil, apiErr
	}
	r := &EmbeddingsRequest{parsedBody: pb, lim: opt.Limits.orDefaults()}
	if apiErr := r.validate(); apiErr != nil {
		r.Release()
		return nil, apiErr
	}
	r.Body = body
	return r, nil
}

func (r *EmbeddingsRequest) validate() *APIError {
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
		switch string(k) {
		case "model":
			sawModel = true
			r.Model, apiErr = modelName(v)
		case "input":
			sawInput = true
			apiErr = r.validateInput(v)
		case "encoding_format":
			switch {
			case v.Type() == fastjson.TypeNull:
			case v.Type() != fastjson.TypeString:
				apiErr = typeErr("encoding_format", `"float" or "base64"`)
			case string(v.GetStringBytes()) == "base64":
				r.Base64 = true
			case string(v.GetStringBytes()) != "float":
				apiErr = BadRequest("encoding_format", `encoding_format must be "float" or "base64", got `+strconv.Quote(string(v.GetStringBytes())))
			}
		case "dimensions":
			if v.Type() != fastjson.TypeNull {
				r.Dimensions, apiErr = intIn(v, "dimensions", 1, MaxEmbeddingDimensions)
			}
		case "user":
			if v.Type() != fastjson.TypeString {
				apiErr = typeErr("user", "a string")
			}
		}
	})
	switch {
	case apiErr != nil:
		return apiErr
	case !sawModel:
		return BadRequest("model", "you must provide a model parameter")
	case !sawInput:
		return BadRequest("input", "input is required")
	}
	return nil
}

const inputShapes = "input must be a non-empty string, an array of non-empty strings, an array of token ids or an array of non-empty token id arrays"

func (r *EmbeddingsRequest) validateInput(v *fastjson.Value) *APIError {
	switch v.Type() {
	case fastjson.TypeString:
		if len(v.GetStringBytes()) == 0 {
			return BadRequest("input", inputShapes)
		}
		r.Inputs = []*fastjson.Value{v}
		return nil
	case fastjson.TypeArray:
	default:
		return BadRequest("input", inputShapes)
	}
	items := v.GetArray()
	if len(items) == 0 {
		return BadRequest("input", inputShapes)
	}
	switch items[0].Type() {
	case fastjson.TypeNumber: // one input of token ids
		if e := r.validateTokenIDs(v, "input"); e != nil {
			return e
		}
		r.Inputs = []*fastjson.Value{v}
		return nil
	case fastjson.TypeString, fastjson.TypeArray:
	default:
		return BadRequest("input[0]", inputShapes)
	}
	if len(items) > MaxEmbeddingInputs {
		return BadRequest("input", "input holds "+strconv.Itoa(len(items))+" inputs; at most "+strconv.Itoa(MaxEmbeddingInputs)+" are allowed")
	}
	kind := items[0].Type()
	for i, it := range items {
		param := "input[" + strconv.Itoa(i) + "]"
		if it.Type() != kind {
			return BadRequest(param, "input mixes strings and token arrays: "+inputShapes)
		}
		if kind == fastjson.TypeString {
			if len(it.GetStringBytes()) == 0 {
				return BadRequest(param, param+" is an empty string: "+inputShapes)
			}
			continue
		}
		if len(it.GetArray()) == 0 {
			return BadRequest(param, param+" is an empty token array: "+inputShapes)
		}
		if e := r.validateTokenIDs(it, param); e != nil {
			return e
		}
	}
	r.Inputs = items
	return nil
}

// validateTokenIDs checks an array of token ids: at most MaxTokenIDs
// integers from 0 to 2^31-1.
func (r *EmbeddingsRequest) validateTokenIDs(v *fastjson.Value, param string) *APIError {
	ids := v.GetArray()
	if len(ids) > r.lim.MaxTokenIDs {
		return tooMany(param, r.lim.MaxTokenIDs)
	}
	for i, t := range ids {
		if t.Type() != fastjson.TypeNumber {
			return BadRequest(param, param+" must hold token ids (integers), found a "+t.Type().String()+" at "+strconv.Itoa(i))
		}
		if _, e := intIn(t, param, 0, 1<<31-1); e != nil {
			return BadRequest(param, param+"["+strconv.Itoa(i)+"] is not a token id (an integer from 0 to 2147483647)")
		}
	}
	return nil
}

// UpstreamBody is the body to send to a node for the inputs at idx (nil:
// all of them, in order), naming model. With every input and the model
// asked for, it is the client's body as is; otherwise the same object
// with model and input replaced (input always an array then). It changes
// the parsed tree: call it once.
func (r *EmbeddingsRequest) UpstreamBody(model string, idx []int) []byte {
	if idx == nil && model == r.Model {
		return r.Body
	}
	var arena fastjson.Arena
	if model != r.Model {
		r.root.Set("model", arena.NewString(model))
	}
	if idx != nil {
		in := arena.NewArray()
		for j, i := range idx {
			in.SetArrayItem(j, r.Inputs[i])
		}
		r.root.Set("input", in)
	}
	return AppendJSONValue(make([]byte, 0, len(r.Body)+len(model)), r.root)
}
