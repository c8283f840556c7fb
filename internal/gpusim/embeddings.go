package gpusim

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"math"
	"strconv"
	"sync"
	"time"

	"github.com/valyala/fasthttp"
	"github.com/valyala/fastjson"

	"frontdoor/embed"
)

// MaxEmbeddingInputs is the most texts one /v1/embeddings call may carry.
const MaxEmbeddingInputs = 2048

// embedders holds one deterministic embedder per vector length asked for.
var embedders sync.Map // int -> *embed.Local

func embedderFor(dims int) *embed.Local {
	if e, ok := embedders.Load(dims); ok {
		return e.(*embed.Local)
	}
	e, _ := embedders.LoadOrStore(dims, embed.NewLocal(dims))
	return e.(*embed.Local)
}

// embeddings answers POST /v1/embeddings in OpenAI's shape. The vectors are
// deterministic: frontdoor's local embedder (lexical features hashed into
// EmbeddingDims, or the request's "dimensions"), so paraphrases with the
// same words are close and the gateway's semantic cache behaves as with a
// real model. Any model name is accepted. Auth, the rate limit and
// fail_rate apply as for generation.
func (s *Server) embeddings(ctx *fasthttp.RequestCtx) {
	s.received.Add(1)
	if !s.authorized(ctx) {
		s.reject(ctx, errUnauthorized, "Unauthorized")
		return
	}
	if s.limiter != nil && !s.limiter.allow(time.Now()) {
		s.reject(ctx, errRateLimited, "Rate limit exceeded: more than "+strconv.Itoa(s.cfg.RPM)+" requests per minute")
		return
	}
	p := parserPool.Get()
	defer parserPool.Put(p)
	v, err := p.ParseBytes(ctx.PostBody())
	if err != nil || v.Type() != fastjson.TypeObject {
		s.reject(ctx, errBadRequest, "Request body must be a JSON object")
		return
	}
	inputs, tokenCounts, msg := embeddingInputs(v.Get("input"))
	if msg != "" {
		s.reject(ctx, errBadRequest, msg)
		return
	}
	asBase64 := false
	switch f := v.Get("encoding_format"); {
	case f == nil || f.Type() == fastjson.TypeNull || string(f.GetStringBytes()) == "float":
	case string(f.GetStringBytes()) == "base64":
		asBase64 = true
	default:
		s.reject(ctx, errBadRequest, `encoding_format: must be "float" or "base64"`)
		return
	}
	dims := s.cfg.EmbeddingDims
	if d := v.Get("dimensions"); d != nil {
		n, err := d.Int()
		if err != nil || n < embed.MinDims || n > embed.MaxDims {
			s.reject(ctx, errBadRequest, "dimensions: must be an integer between "+strconv.Itoa(embed.MinDims)+" and "+strconv.Itoa(embed.MaxDims))
			return
		}
		dims = n
	}
	model := string(v.GetStringBytes("model"))
	if fr := s.currentFailRate(); fr > 0 && s.random() < fr {
		s.failed.Add(1)
		s.writeError(ctx, errEngine, "Simulated engine failure (gpusim fail_rate)")
		return
	}

	e := embedderFor(dims)
	out := make([]byte, 0, 64+len(inputs)*dims*12)
	out = append(out, `{"object":"list","data":[`...)
	tokens := 0
	for i, text := range inputs {
		vec, _ := e.Embed(context.Background(), text)
		if i > 0 {
			out = append(out, ',')
		}
		out = append(out, `{"object":"embedding","index":`...)
		out = strconv.AppendInt(out, int64(i), 10)
		out = append(out, `,"embedding":`...)
		out = appendVector(out, vec, asBase64)
		out = append(out, '}')
		if n := tokenCounts[i]; n > 0 {
			tokens += n
		} else {
			tokens += estimateTokens(len(text))
		}
	}
	out = append(out, `],"model":`...)
	out = appendJSONString(out, model)
	out = append(out, `,"usage":{"prompt_tokens":`...)
	out = strconv.AppendInt(out, int64(tokens), 10)
	out = append(out, `,"total_tokens":`...)
	out = strconv.AppendInt(out, int64(tokens), 10)
	out = append(out, "}}"...)
	s.promptTokens.Add(int64(tokens))
	s.embeddingInputs.Add(int64(len(inputs)))
	s.embeddingRequests.Add(1)
	s.completed.Add(1)
	ctx.SetContentType("application/json")
	ctx.Response.SetBodyRaw(out)
}

const inputShapes = "input: must be a non-empty string, an array of strings, an array of token ids or an array of token id arrays"

// embeddingInputs reads input: a string, an array of strings, an array of
// token ids (one input) or an array of token id arrays. A token input is
// embedded as the text of its ids; tokenCounts holds its length (0 for a
// string). msg says what is wrong, or is "".
func embeddingInputs(in *fastjson.Value) (inputs []string, tokenCounts []int, msg string) {
	tokenText := func(v *fastjson.Value) (string, int, bool) {
		ids := v.GetArray()
		var b []byte
		for i, id := range ids {
			n, err := id.Int()
			if err != nil || n < 0 {
				return "", 0, false
			}
			if i > 0 {
				b = append(b, ' ')
			}
			b = strconv.AppendInt(b, int64(n), 10)
		}
		return string(b), len(ids), len(ids) > 0
	}
	switch {
	case in == nil:
		return nil, nil, "input: field required"
	case in.Type() == fastjson.TypeString && len(in.GetStringBytes()) > 0:
		return []string{string(in.GetStringBytes())}, []int{0}, ""
	case in.Type() != fastjson.TypeArray:
		return nil, nil, inputShapes
	}
	arr := in.GetArray()
	if len(arr) == 0 || len(arr) > MaxEmbeddingInputs {
		return nil, nil, "input: must hold 1 to " + strconv.Itoa(MaxEmbeddingInputs) + " inputs"
	}
	if arr[0].Type() == fastjson.TypeNumber {
		text, n, ok := tokenText(in)
		if !ok {
			return nil, nil, inputShapes
		}
		return []string{text}, []int{n}, ""
	}
	for _, x := range arr {
		switch x.Type() {
		case fastjson.TypeString:
			inputs, tokenCounts = append(inputs, string(x.GetStringBytes())), append(tokenCounts, 0)
		case fastjson.TypeArray:
			text, n, ok := tokenText(x)
			if !ok {
				return nil, nil, inputShapes
			}
			inputs, tokenCounts = append(inputs, text), append(tokenCounts, n)
		default:
			return nil, nil, inputShapes
		}
	}
	return inputs, tokenCounts, ""
}

// appendVector writes a vector as JSON numbers, each the shortest decimal
// that reads back as its float32 (as Go servers write them), or as base64
// of its little-endian float32s.
func appendVector(out []byte, vec []float32, asBase64 bool) []byte {
	if asBase64 {
		raw := make([]byte, 4*len(vec))
		for k, x := range vec {
			binary.LittleEndian.PutUint32(raw[4*k:], math.Float32bits(x))
		}
		out = append(out, '"')
		out = base64.StdEncoding.AppendEncode(out, raw)
		return append(out, '"')
	}
	out = append(out, '[')
	for k, x := range vec {
		if k > 0 {
			out = append(out, ',')
		}
		out = strconv.AppendFloat(out, float64(x), 'g', -1, 32)
	}
	return append(out, ']')
}
