package reply

import (
	"strconv"
	"time"

	"frontdoor/adapters"
	"frontdoor/admission"
)

// The gateway's own error answers, in the OpenAI envelope. Errors of a
// request's body come from adapters.ParseRequest, and a node's from its
// adapter's MapError.

// Internal answers a bug: a panic in a handler. id is the request id,
// when there is one, for the operator to find its log line.
func Internal(id string) *adapters.APIError {
	msg := "internal error"
	if id != "" {
		msg += "; request id " + id
	}
	return &adapters.APIError{Status: 500, Type: adapters.TypeServer, Code: "internal_error", Message: msg}
}

// UnknownPath answers a path the gateway does not serve, with a hint for
// an OpenAI path without its /v1.
func UnknownPath(path string) *adapters.APIError {
	msg := "unknown path " + strconv.Quote(path)
	switch path {
	case "/chat/completions", "/completions", "/embeddings", "/responses", "/models":
		msg += "; did you mean " + strconv.Quote("/v1"+path) + "?"
	}
	return &adapters.APIError{Status: 404, Type: adapters.TypeNotFound, Code: "unknown_url", Message: msg}
}

// HeaderTooLarge answers request headers over the server's read buffer.
func HeaderTooLarge() *adapters.APIError {
	return &adapters.APIError{Status: 431, Type: adapters.TypeInvalidRequest, Code: "request_header_too_large",
		Message: "request line and headers exceed 16 KiB"}
}

// ClientTimeout answers a client too slow to send its request.
func ClientTimeout() *adapters.APIError {
	return &adapters.APIError{Status: 408, Type: adapters.TypeInvalidRequest, Code: "request_timeout",
		Message: "request not received within timeouts.client"}
}

// BodyTooLarge answers a body over limits.max_body_bytes (limit).
func BodyTooLarge(limit int64) *adapters.APIError {
	return &adapters.APIError{Status: 413, Type: adapters.TypeInvalidRequest, Code: "request_too_large",
		Message: "request body exceeds limits.max_body_bytes (" + strconv.FormatInt(limit, 10) + " bytes)"}
}

// UnsupportedMediaType answers a body that is not application/json.
func UnsupportedMediaType(contentType []byte) *adapters.APIError {
	return &adapters.APIError{Status: 415, Type: adapters.TypeInvalidRequest, Code: "unsupported_media_type",
		Message: "Content-Type must be application/json, got " + strconv.Quote(string(contentType))}
}

// UnknownTenant answers an X-Frontdoor-Tenant that names no tenant.
func UnknownTenant() *adapters.APIError {
	return &adapters.APIError{Status: 400, Type: adapters.TypeInvalidRequest, Code: "unknown_tenant",
		Message: "X-Frontdoor-Tenant names no configured tenant"}
}

// MissingAPIKey answers a request without a bearer key where one is needed.
func MissingAPIKey() *adapters.APIError {
	return &adapters.APIError{Status: 401, Type: adapters.TypeAuthentication, Code: "missing_api_key",
		Message: "missing API key: send Authorization: Bearer <key>"}
}

// InvalidAPIKey answers a bearer key no tenant holds.
func InvalidAPIKey() *adapters.APIError {
	return &adapters.APIError{Status: 401, Type: adapters.TypeAuthentication, Code: "invalid_api_key", Message: "invalid API key"}
}

// ModelNotAllowed answers a model outside the tenant's allow-list.
func ModelNotAllowed(tenant, model string) *adapters.APIError {
	return &adapters.APIError{Status: 403, Type: adapters.TypePermission, Code: "model_not_allowed", Param: "model",
		Message: "tenant " + strconv.Quote(tenant) + " may not use model " + strconv.Quote(model)}
}

// Rejected is admission's refusal: 429 with Retry-After.
func Rejected(r *admission.Rejection) *adapters.APIError {
	return &adapters.APIError{Status: 429, Type: adapters.TypeRateLimit, Code: r.Limit, Message: r.Message, RetryAfter: r.RetryAfterSeconds()}
}

// SpillQuota is the hosted API's own quota used up, with the wait.
func SpillQuota(limit string, wait time.Duration) *adapters.APIError {
	return &adapters.APIError{Status: 429, Type: adapters.TypeRateLimit, Code: limit, RetryAfter: ceilSeconds(wait),
		Message: "local capacity is full and the hosted API's quota (" + limit + ") is used up; retry after the Retry-After delay"}
}

// ceilSeconds is d in whole seconds, rounded up, at least 1: a Retry-After.
func ceilSeconds(d time.Duration) int {
	s := int((d + time.Second - 1) / time.Second)
	return max(s, 1)
}
