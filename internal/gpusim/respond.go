package gpusim

import (
	"strconv"

	"github.com/valyala/fasthttp"
)

// apiError describes one error condition and how each kind reports it.
type apiError struct {
	status int
	vType  string // vllm / sglang "type"
	tgiMsg string // fixed TGI message ("" = use the generic one)
	tgiTyp string // TGI "error_type"
	dsCode string // DashScope error.code
	dsType string // DashScope error.type
	dsMsg  string // fixed DashScope message ("" = use the generic one)
}

var (
	errBadRequest = &apiError{status: 400, vType: "BadRequestError", tgiTyp: "validation",
		dsCode: "invalid_parameter_error", dsType: "invalid_request_error"}
	errThinking = &apiError{status: 400, vType: "BadRequestError", tgiTyp: "validation",
		dsCode: "invalid_parameter_error", dsType: "invalid_request_error",
		dsMsg: "parameter.enable_thinking must be set to false for non-streaming calls"}
	errUnauthorized = &apiError{status: 401, vType: "UnauthorizedError", tgiTyp: "unauthorized",
		dsCode: "invalid_api_key", dsType: "invalid_request_error", dsMsg: "Incorrect API key provided. "}
	errModelNotFound = &apiError{status: 404, vType: "NotFoundError", tgiTyp: "not_found",
		dsCode: "model_not_found", dsType: "invalid_request_error"}
	errNotFound = &apiError{status: 404, vType: "NotFoundError", tgiTyp: "not_found",
		dsCode: "not_found", dsType: "invalid_request_error"}
	errRouteNotFound = &apiError{status: 404, vType: "NotFoundError", tgiTyp: "not_found",
		dsCode: "not_found", dsType: "invalid_request_error"}
	errMethod = &apiError{status: 405, vType: "MethodNotAllowedError", tgiTyp: "method_not_allowed",
		dsCode: "method_not_allowed", dsType: "invalid_request_error"}
	errQueueFull = &apiError{status: 429, vType: "TooManyRequestsError",
		tgiMsg: "Model is overloaded", tgiTyp: "overloaded",
		dsCode: "Throttling", dsType: "Throttling", dsMsg: "Requests throttling triggered."}
	errRateLimited = &apiError{status: 429, vType: "TooManyRequestsError",
		tgiMsg: "Model is overloaded", tgiTyp: "overloaded",
		dsCode: "Throttling.RateQuota", dsType: "Throttling.RateQuota",
		dsMsg: "Requests rate limit exceeded, please try again later."}
	errEngine = &apiError{status: 500, vType: "InternalServerError", tgiTyp: "generation",
		dsCode: "InternalError", dsType: "internal_error",
		dsMsg: "An internal error has occured, please try again later or contact service support."}
	errUnavailable = &apiError{status: 503, vType: "ServiceUnavailableError", tgiTyp: "unhealthy",
		dsCode: "ServiceUnavailable", dsType: "service_unavailable"}
)

// appendErrorBody appends e's body in kind's shape.
func appendErrorBody(dst []byte, kind Kind, e *apiError, msg string) []byte {
	switch kind {
	case KindTGI:
		if e.tgiMsg != "" {
			msg = e.tgiMsg
		}
		dst = append(dst, `{"error":`...)
		dst = appendJSONString(dst, msg)
		dst = append(dst, `,"error_type":`...)
		dst = appendJSONString(dst, e.tgiTyp)
		return append(dst, '}')
	case KindDashScope:
		if e.dsMsg != "" {
			msg = e.dsMsg
		}
		dst = append(dst, `{"error":{"code":`...)
		dst = appendJSONString(dst, e.dsCode)
		dst = append(dst, `,"message":`...)
		dst = appendJSONString(dst, msg)
		dst = append(dst, `,"type":`...)
		dst = appendJSONString(dst, e.dsType)
		return append(dst, `}}`...)
	default: // vllm, sglang
		dst = append(dst, `{"object":"error","message":`...)
		dst = appendJSONString(dst, msg)
		dst = append(dst, `,"type":`...)
		dst = appendJSONString(dst, e.vType)
		dst = append(dst, `,"param":null,"code":`...)
		dst = strconv.AppendInt(dst, int64(e.status), 10)
		return append(dst, '}')
	}
}

// writeError answers ctx with e in the server kind's shape.
func (s *Server) writeError(ctx *fasthttp.RequestCtx, e *apiError, msg string) {
	ctx.SetStatusCode(e.status)
	ctx.SetContentType("application/json")
	ctx.Response.SetBodyRaw(appendErrorBody(make([]byte, 0, 192), s.cfg.Kind, e, msg))
}

const hexDigits = "0123456789abcdef"

// appendJSONString appends s as a JSON string literal.
func appendJSONString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' {
			continue
		}
		dst = append(dst, s[start:i]...)
		switch c {
		case '"':
			dst = append(dst, `\"`...)
		case '\\':
			dst = append(dst, `\\`...)
		case '\n':
			dst = append(dst, `\n`...)
		case '\r':
			dst = append(dst, `\r`...)
		case '\t':
			dst = append(dst, `\t`...)
		default:
			dst = append(dst, `\u00`...)
			dst = append(dst, hexDigits[c>>4], hexDigits[c&0xf])
		}
		start = i + 1
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

// appendUsage appends an OpenAI usage object.
func appendUsage(dst []byte, prompt, completion, reasoning int) []byte {
	dst = append(dst, `{"prompt_tokens":`...)
	dst = strconv.AppendInt(dst, int64(prompt), 10)
	dst = append(dst, `,"total_tokens":`...)
	dst = strconv.AppendInt(dst, int64(prompt+completion), 10)
	dst = append(dst, `,"completion_tokens":`...)
	dst = strconv.AppendInt(dst, int64(completion), 10)
	if reasoning > 0 {
		dst = append(dst, `,"completion_tokens_details":{"reasoning_tokens":`...)
		dst = strconv.AppendInt(dst, int64(reasoning), 10)
		dst = append(dst, '}')
	}
	return append(dst, '}')
}
