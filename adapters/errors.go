package adapters

// Error types used in the OpenAI error envelope.
const (
	TypeInvalidRequest = "invalid_request_error"
	TypeAuthentication = "authentication_error"
	TypePermission     = "permission_error"
	TypeNotFound       = "not_found_error"
	TypeRateLimit      = "rate_limit_exceeded"
	TypeServer         = "server_error"
	TypeUpstream       = "upstream_error"
	TypeUnavailable    = "service_unavailable"
)

// APIError is an error that is answered to the client as the OpenAI error
// envelope {"error":{"message","type","param","code"}} with Status.
type APIError struct {
	Status  int
	Message string
	Type    string
	Param   string // empty is written as null
	Code    string // empty is written as null
	// RetryAfter, in whole seconds, is sent as the Retry-After header when > 0.
	RetryAfter int
}

func (e *APIError) Error() string { return e.Message }

// AppendJSON appends the error envelope to dst.
func (e *APIError) AppendJSON(dst []byte) []byte {
	dst = append(dst, `{"error":{"message":`...)
	dst = AppendJSONString(dst, e.Message)
	dst = append(dst, `,"type":`...)
	dst = AppendJSONString(dst, e.Type)
	dst = append(dst, `,"param":`...)
	dst = appendNullableString(dst, e.Param)
	dst = append(dst, `,"code":`...)
	dst = appendNullableString(dst, e.Code)
	return append(dst, "}}"...)
}

func appendNullableString(dst []byte, s string) []byte {
	if s == "" {
		return append(dst, "null"...)
	}
	return AppendJSONString(dst, s)
}

// BadRequest is a 400 invalid_request_error about param.
func BadRequest(param, msg string) *APIError {
	return &APIError{Status: 400, Type: TypeInvalidRequest, Param: param, Message: msg}
}

// NotFound is a 404, with code "model_not_found" when param is "model".
func NotFound(param, msg string) *APIError {
	e := &APIError{Status: 404, Type: TypeInvalidRequest, Param: param, Message: msg}
	if param == "model" {
		e.Code = "model_not_found"
	}
	return e
}

// UpstreamError is a 502 for a failed upstream.
func UpstreamError(msg string) *APIError {
	return &APIError{Status: 502, Type: TypeUpstream, Code: "upstream_error", Message: msg}
}

// UpstreamTimeout is a 504 for an upstream that did not answer in time.
func UpstreamTimeout(msg string) *APIError {
	return &APIError{Status: 504, Type: TypeUpstream, Code: "upstream_timeout", Message: msg}
}

// Unavailable is a 503 with Retry-After.
func Unavailable(msg string, retryAfter int) *APIError {
	return &APIError{Status: 503, Type: TypeUnavailable, Code: "no_capacity", Message: msg, RetryAfter: retryAfter}
}
