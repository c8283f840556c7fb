package adapters

import (
	"strconv"
	"strings"

	"github.com/valyala/fastjson"
)

// RetryableStatus reports whether an upstream status means "try another
// node": the node is overloaded (429), unavailable (502, 503), timed out
// (504) or its engine failed (500, usually node-local such as an OOM).
func RetryableStatus(status int) bool {
	switch status {
	case 429, 500, 502, 503, 504:
		return true
	}
	return false
}

// MapError turns an upstream error body into the OpenAI envelope. It
// understands OpenAI's {"error":{...}}, vLLM's {"object":"error",...},
// TGI's {"error":"...","error_type":"..."} and DashScope's codes.
func (b *HTTPBackend) MapError(status int, body []byte) *APIError {
	return MapUpstreamError(b.target.Kind, b.target.Name, status, body)
}

// MapUpstreamError is MapError for any kind.
func MapUpstreamError(kind Kind, name string, status int, body []byte) *APIError {
	msg, typ, code, param := "", "", "", ""
	if v, err := fastjson.ParseBytes(body); err == nil {
		if e := v.Get("error"); e != nil && e.Type() == fastjson.TypeObject {
			msg, typ = string(e.GetStringBytes("message")), string(e.GetStringBytes("type"))
			code, param = jsonScalar(e.Get("code")), string(e.GetStringBytes("param"))
		} else if e != nil && e.Type() == fastjson.TypeString {
			msg, typ = string(e.GetStringBytes()), string(v.GetStringBytes("error_type")) // TGI
		} else {
			msg, typ = string(v.GetStringBytes("message")), string(v.GetStringBytes("type")) // vLLM legacy
			code = string(v.GetStringBytes("code"))
		}
	}
	if msg == "" {
		msg = strings.TrimSpace(string(body))
		if len(msg) > 200 {
			msg = msg[:200]
		}
		if msg == "" {
			msg = "upstream answered HTTP " + strconv.Itoa(status)
		}
	}
	out := &APIError{Status: status, Message: msg, Type: TypeInvalidRequest, Code: code, Param: param}
	switch {
	case kind == KindTGI && typ == "overloaded":
		out.Status, out.Type, out.Code = 429, TypeRateLimit, "overloaded"
	case strings.HasPrefix(code, "Throttling"):
		out.Status, out.Type = 429, TypeRateLimit
	case status == 401 || status == 403:
		// Our credentials for the upstream were refused: the client can't fix
		// that, so it is a gateway fault, described without the key.
		out.Status, out.Type, out.Code = 502, TypeUpstream, "upstream_auth"
		out.Message = "upstream " + name + " refused the gateway's credentials (HTTP " + strconv.Itoa(status) + "); check its api_key_env"
	case status == 429:
		out.Type = TypeRateLimit
	case status >= 500:
		out.Status, out.Type = 502, TypeUpstream
		if out.Code == "" {
			out.Code = "upstream_error"
		}
		out.Message = "upstream " + name + " failed: " + msg
	case code == "invalid_parameter_error" || status == 400:
		out.Status = 400
	}
	return out
}

func jsonScalar(v *fastjson.Value) string {
	if v == nil {
		return ""
	}
	switch v.Type() {
	case fastjson.TypeString:
		return string(v.GetStringBytes())
	case fastjson.TypeNumber:
		return v.String()
	}
	return ""
}
