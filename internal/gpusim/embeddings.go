package gpusim

import (
	"context"
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
	var inputs []string
	switch in := v.Get("input"); {
	case in == nil:
		s.reject(ctx, errBadRequest, "input: field required")
		return
	case in.Type() == fastjson.TypeString:
		inputs = []string{string(in.GetStringBytes())}
	case in.Type() == fastjson.TypeArray:
		arr := in.GetArray()
		if len(arr) == 0 || len(arr) > MaxEmbeddingInputs {
			s.reject(ctx, errBadRequest, "input: must hold 1 to "+strconv.Itoa(MaxEmbeddingInputs)+" strings")
			return
		}
		for _, x := range arr {
			b, err := x.StringBytes()
			if err != nil {
				s.reject(ctx, errBadRequest, "input: must be a string or an array of strings")
				return
			}
			inputs = append(inputs, string(b))
		}
	default:
		s.reject(ctx, errBadRequest, "input: must be a string or an array of strings")
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
		out = append(out, `,"embedding":[`...)
		for k, x := range vec {
			if k > 0 {
				out = append(out, ',')
			}
			out = strconv.AppendFloat(out, float64(x), 'g', 8, 32)
		}
		out = append(out, "]}"...)
		tokens += estimateTokens(len(text))
	}
	out = append(out, `],"model":`...)
	out = appendJSONString(out, model)
	out = append(out, `,"usage":{"prompt_tokens":`...)
	out = strconv.AppendInt(out, int64(tokens), 10)
	out = append(out, `,"total_tokens":`...)
	out = strconv.AppendInt(out, int64(tokens), 10)
	out = append(out, "}}"...)
	s.promptTokens.Add(int64(tokens))
	s.completed.Add(1)
	ctx.SetContentType("application/json")
	ctx.Response.SetBodyRaw(out)
}
