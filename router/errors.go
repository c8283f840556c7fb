package router

import (
	"strconv"
	"time"

	"frontdoor/adapters"
	"frontdoor/admission"
)

// The gateway's own error answers, in the OpenAI envelope. Errors of a
// request's body come from adapters.ParseRequest, and a node's from its
// adapter's MapError.

// errInternal answers a bug: a panic in a handler. id is the request id,
// when there is one, for the operator to find its log line.
func errInternal(id string) *adapters.APIError {
	msg := "internal error"
	if id != "" {
		msg += "; request id " + id
	}
	return &adapters.APIError{Status: 500, Type: adapters.TypeServer, Code: "internal_error", Message: msg}
}

func errUnknownPath(path string) *adapters.APIError {
	msg := "unknown path " + strconv.Quote(path)
	switch path {
	case "/chat/completions", "/completions", "/embeddings", "/responses", "/models":
		msg += "; did you mean " + strconv.Quote("/v1"+path) + "?"
	}
	return &adapters.APIError{Status: 404, Type: adapters.TypeNotFound, Code: "unknown_url", Message: msg}
}

func errHeaderTooLarge() *adapters.APIError {
	return &adapters.APIError{Status: 431, Type: adapters.TypeInvalidRequest, Code: "request_header_too_large",
		Message: "request line and headers exceed 16 KiB"}
}

func errClientTimeout() *adapters.APIError {
	return &adapters.APIError{Status: 408, Type: adapters.TypeInvalidRequest, Code: "request_timeout",
		Message: "request not received within timeouts.client"}
}

func errBodyTooLarge(limit int64) *adapters.APIError {
	return &adapters.APIError{Status: 413, Type: adapters.TypeInvalidRequest, Code: "request_too_large",
		Message: "request body exceeds limits.max_body_bytes (" + strconv.FormatInt(limit, 10) + " bytes)"}
}

func errUnsupportedMediaType(contentType []byte) *adapters.APIError {
	return &adapters.APIError{Status: 415, Type: adapters.TypeInvalidRequest, Code: "unsupported_media_type",
		Message: "Content-Type must be application/json, got " + strconv.Quote(string(contentType))}
}

func errUnknownTenant() *adapters.APIError {
	return &adapters.APIError{Status: 400, Type: adapters.TypeInvalidRequest, Code: "unknown_tenant",
		Message: "X-Frontdoor-Tenant names no configured tenant"}
}

func errMissingAPIKey() *adapters.APIError {
	return &adapters.APIError{Status: 401, Type: adapters.TypeAuthentication, Code: "missing_api_key",
		Message: "missing API key: send Authorization: Bearer <key>"}
}

func errInvalidAPIKey() *adapters.APIError {
	return &adapters.APIError{Status: 401, Type: adapters.TypeAuthentication, Code: "invalid_api_key", Message: "invalid API key"}
}

func errModelNotAllowed(tenant, model string) *adapters.APIError {
	return &adapters.APIError{Status: 403, Type: adapters.TypePermission, Code: "model_not_allowed", Param: "model",
		Message: "tenant " + strconv.Quote(tenant) + " may not use model " + strconv.Quote(model)}
}

// errRejected is admission's refusal: 429 with Retry-After.
func errRejected(r *admission.Rejection) *adapters.APIError {
	return &adapters.APIError{Status: 429, Type: adapters.TypeRateLimit, Code: r.Limit, Message: r.Message, RetryAfter: r.RetryAfterSeconds()}
}

// errSpillQuota is the hosted API's own quota used up, with the wait.
func errSpillQuota(limit string, wait time.Duration) *adapters.APIError {
	return &adapters.APIError{Status: 429, Type: adapters.TypeRateLimit, Code: limit, RetryAfter: ceilSeconds(wait),
		Message: "local capacity is full and the hosted API's quota (" + limit + ") is used up; retry after the Retry-After delay"}
}

// ceilSeconds is d in whole seconds, rounded up, at least 1: a Retry-After.
func ceilSeconds(d time.Duration) int {
	s := int((d + time.Second - 1) / time.Second)
	return max(s, 1)
}
