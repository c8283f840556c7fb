// Package reply writes the gateway's own HTTP answers on a fasthttp
// request: errors in the OpenAI envelope, JSON documents, the 405 of a
// route that takes one method, and the RateLimit headers. The router and its operator surface share
// it.
package reply

import (
	"encoding/json"
	"strconv"
	"time"

	"github.com/valyala/fasthttp"

	"frontdoor/adapters"
)

// Error writes e as the answer, replacing any body written so far.
func Error(ctx *fasthttp.RequestCtx, e *adapters.APIError) {
	ctx.Response.ResetBody()
	ctx.SetStatusCode(e.Status)
	ctx.SetContentType("application/json")
	if e.RetryAfter > 0 {
		ctx.Response.Header.Set(fasthttp.HeaderRetryAfter, strconv.Itoa(e.RetryAfter))
	}
	ctx.Response.SetBodyRaw(e.AppendJSON(nil))
}

// JSON writes v, encoded, as the answer with status.
func JSON(ctx *fasthttp.RequestCtx, status int, v any) {
	b, _ := json.Marshal(v)
	ctx.SetStatusCode(status)
	ctx.SetContentType("application/json")
	ctx.SetBody(b)
}

// OnlyMethod reports whether the request uses method (HEAD counts as GET);
// if not, it answers 405 with Allow.
func OnlyMethod(ctx *fasthttp.RequestCtx, method string) bool {
	if string(ctx.Method()) == method || (method == fasthttp.MethodGet && ctx.IsHead()) {
		return true
	}
	ctx.Response.Header.Set(fasthttp.HeaderAllow, method)
	Error(ctx, MethodNotAllowed(string(ctx.Method()), string(ctx.Path()), method))
	return false
}

// MethodNotAllowed is the 405 of a route that takes allowed only.
func MethodNotAllowed(method, path, allowed string) *adapters.APIError {
	return &adapters.APIError{Status: 405, Type: adapters.TypeInvalidRequest, Code: "method_not_allowed",
		Message: "method " + method + " is not allowed on " + path + "; use " + allowed}
}

// RateLimit sets OpenAI's x-ratelimit-{limit,remaining,reset}-<kind>
// headers; kind is "requests" or "tokens". Reset is a Go duration written
// to the millisecond ("0s", "20ms", "1.5s", "6m0s"), as OpenAI writes it.
func RateLimit(h *fasthttp.ResponseHeader, kind string, limit, remaining int, reset time.Duration) {
	if reset > 0 && reset < time.Millisecond {
		reset = time.Millisecond
	}
	h.Set("x-ratelimit-limit-"+kind, strconv.Itoa(limit))
	h.Set("x-ratelimit-remaining-"+kind, strconv.Itoa(remaining))
	h.Set("x-ratelimit-reset-"+kind, reset.Round(time.Millisecond).String())
}
