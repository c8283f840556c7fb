package gpusim

import (
	"bytes"
	"math"
	"strconv"
	"time"

	"github.com/valyala/fasthttp"
	"github.com/valyala/fastjson"
)

var parserPool fastjson.ParserPool

// dashScopePrefix is DashScope's compatible-mode base path; in dashscope
// mode "/compatible-mode/v1/..." is served like "/v1/...".
const dashScopePrefix = "/compatible-mode"

// handle routes a request. Only the handler goroutine touches ctx.
func (s *Server) handle(ctx *fasthttp.RequestCtx) {
	path := ctx.Path()
	if s.cfg.Kind == KindDashScope {
		path = bytes.TrimPrefix(path, []byte(dashScopePrefix))
	}
	method := ctx.Method()
	switch string(path) {
	case "/health":
		if !s.allowMethod(ctx, method, fasthttp.MethodGet) {
			return
		}
		if !s.healthy.Load() {
			s.writeError(ctx, errUnavailable, "unhealthy")
		}
		return
	case "/metrics":
		if !s.allowMethod(ctx, method, fasthttp.MethodGet) {
			return
		}
		ctx.SetContentType("text/plain; version=0.0.4; charset=utf-8")
		ctx.Response.SetBodyRaw(s.appendMetrics(make([]byte, 0, 8192)))
		return
	}

	now := time.Now()
	if string(path) != "/v1/models" || string(method) != fasthttp.MethodGet {
		s.rec.record(ctx, now)
	}
	switch string(path) {
	case "/v1/chat/completions":
		if s.allowMethod(ctx, method, fasthttp.MethodPost) {
			s.generate(ctx, now, apiChat)
		}
	case "/v1/completions":
		if s.allowMethod(ctx, method, fasthttp.MethodPost) {
			s.generate(ctx, now, apiCompletion)
		}
	case "/v1/responses":
		if s.allowMethod(ctx, method, fasthttp.MethodPost) {
			s.generate(ctx, now, apiResponses)
		}
	case "/v1/embeddings":
		if s.allowMethod(ctx, method, fasthttp.MethodPost) {
			s.embeddings(ctx)
		}
	case "/v1/models":
		if !s.allowMethod(ctx, method, fasthttp.MethodGet) {
			return
		}
		if !s.authorized(ctx) {
			s.writeError(ctx, errUnauthorized, "Unauthorized")
			return
		}
		ctx.SetContentType("application/json")
		ctx.SetBody(s.modelsBody)
	default:
		if id, ok := bytes.CutPrefix(path, []byte("/v1/responses/")); ok {
			s.storedResponse(ctx, method, string(id))
			return
		}
		s.writeError(ctx, errRouteNotFound, "Not Found")
	}
}

func (s *Server) allowMethod(ctx *fasthttp.RequestCtx, method []byte, want string) bool {
	if string(method) == want || (want == fasthttp.MethodGet && string(method) == fasthttp.MethodHead) {
		return true
	}
	ctx.Response.Header.Set(fasthttp.HeaderAllow, want)
	s.writeError(ctx, errMethod, "Method Not Allowed")
	return false
}

func (s *Server) authorized(ctx *fasthttp.RequestCtx) bool {
	return s.wantAuth == nil || bytes.Equal(ctx.Request.Header.Peek(fasthttp.HeaderAuthorization), s.wantAuth)
}

// reject answers a generation request with a 4xx.
func (s *Server) reject(ctx *fasthttp.RequestCtx, e *apiError, msg string) {
	s.rejected.Add(1)
	s.writeError(ctx, e, msg)
}

// api is the generation endpoint a request came to.
type api uint8

const (
	apiChat api = iota
	apiCompletion
	apiResponses
)

// generate admits a chat, completions or Responses request: checks auth,
// rate limit and the body, draws injected failures, takes a place in the
// scheduler, then runs it inline (non-streaming) or from the body stream
// writer.
func (s *Server) generate(ctx *fasthttp.RequestCtx, now time.Time, kind api) {
	chat := kind == apiChat
	s.received.Add(1)
	if !s.authorized(ctx) {
		s.reject(ctx, errUnauthorized, "Unauthorized")
		return
	}
	if s.limiter != nil && !s.limiter.allow(now) {
		s.reject(ctx, errRateLimited, "Rate limit exceeded: more than "+strconv.Itoa(s.cfg.RPM)+" requests per minute")
		return
	}

	p := parserPool.Get()
	defer parserPool.Put(p)
	v, err := p.ParseBytes(ctx.PostBody())
	if err != nil {
		s.reject(ctx, errBadRequest, "Invalid JSON body: "+err.Error())
		return
	}
	if v.Type() != fastjson.TypeObject {
		s.reject(ctx, errBadRequest, "Request body must be a JSON object")
		return
	}
	model := s.cfg.Models[0]
	if mv := v.Get("model"); mv != nil && mv.Type() != fastjson.TypeNull {
		name, err := mv.StringBytes()
		if err != nil {
			s.reject(ctx, errBadRequest, "model: must be a string")
			return
		}
		if model = s.lookupModel(name); model == "" {
			s.reject(ctx, errModelNotFound, s.modelNotFoundMsg(string(name)))
			return
		}
	}
	switch kind {
	case apiChat:
		if m := v.Get("messages"); m == nil || m.Type() != fastjson.TypeArray {
			s.reject(ctx, errBadRequest, "messages: field required (array)")
			return
		}
	case apiResponses:
		if in := v.Get("input"); in == nil || (in.Type() != fastjson.TypeString && in.Type() != fastjson.TypeArray) {
			s.reject(ctx, errBadRequest, "input: field required (a string or an array)")
			return
		}
		if prev := v.GetStringBytes("previous_response_id"); len(prev) > 0 && !s.stored.has(string(prev)) {
			s.reject(ctx, errNotFound, "Previous response with id '"+string(prev)+"' not found.")
			return
		}
	default:
		if v.Get("prompt") == nil {
			s.reject(ctx, errBadRequest, "prompt: field required")
			return
		}
	}

	j := &job{s: s, chat: chat, model: model, arrival: now, stream: v.GetBool("stream")}
	if kind == apiResponses {
		j.resp = newRespJob(v)
	}
	hash, promptBytes := promptInfo(v)
	j.hash, j.promptTokens = hash, estimateTokens(promptBytes)
	if s.prefix != nil {
		j.blocks = promptBlocks(func(f func([]byte)) { walkPrompt(v, f) }, s.cfg.BlockSize)
	}
	j.n = s.cfg.OutputTokens
	if chat && s.cfg.JudgeLabels != nil {
		if j.verdict = s.judgeRequest(v); j.verdict != verdictNone {
			j.n = 1 // the answer is one word
		}
	}
	maxTok := v.GetInt("max_completion_tokens")
	if maxTok <= 0 {
		maxTok = v.GetInt("max_tokens")
	}
	if j.resp != nil {
		maxTok = v.GetInt("max_output_tokens")
	}
	if maxTok > 0 && maxTok < j.n {
		j.n, j.capped = maxTok, true
	}
	if j.stream {
		j.includeUsage = v.GetBool("stream_options", "include_usage")
	}
	if j.resp == nil {
		j.readChoices(v) // n and tool calls are chat's and completions' (a response is one answer)
	}
	if s.cfg.Kind == KindDashScope && chat {
		et := v.Get("enable_thinking")
		thinkingOff := et != nil && et.Type() == fastjson.TypeFalse
		if !j.stream && !thinkingOff {
			s.reject(ctx, errThinking, "")
			return
		}
		if j.stream && !thinkingOff && j.plain() {
			j.reasoning = reasoningCount(j.hash)
		}
	}

	if fr := s.currentFailRate(); fr > 0 && s.random() < fr {
		s.failed.Add(1)
		s.writeError(ctx, errEngine, "Simulated engine failure (gpusim fail_rate)")
		return
	}
	j.hang = s.cfg.HangRate > 0 && s.random() < s.cfg.HangRate

	t, ok := s.sched.enqueue()
	if !ok {
		s.reject(ctx, errQueueFull, "The server is overloaded: the waiting queue is full (max_waiting="+strconv.Itoa(s.cfg.MaxWaiting)+")")
		return
	}
	j.ticket = t
	j.conn = ctx.Conn()
	j.created = now.Unix()
	j.id = s.idSeq.Add(1)
	s.active.add()
	if !j.stream {
		j.runUnary(ctx)
		return
	}
	ctx.SetContentType("text/event-stream")
	ctx.Response.Header.Set(fasthttp.HeaderCacheControl, "no-cache")
	ctx.Response.ImmediateHeaderFlush = true
	ctx.SetBodyStreamWriter(j.runStream)
}

func (s *Server) lookupModel(name []byte) string {
	for _, m := range s.cfg.Models {
		if m == string(name) {
			return m
		}
	}
	return ""
}

func (s *Server) modelNotFoundMsg(name string) string {
	if s.cfg.Kind == KindDashScope {
		return "The model `" + name + "` does not exist or you do not have access to it."
	}
	return "The model `" + name + "` does not exist."
}

func (s *Server) currentFailRate() float64 { return math.Float64frombits(s.failRate.Load()) }
