package router

import (
	"context"
	"strings"
	"time"

	"github.com/valyala/fasthttp"

	"frontdoor/adapters"
	"frontdoor/internal/reply"
	"frontdoor/internal/telemetry"
	"frontdoor/router/reuse"
)

// GET/DELETE /v1/responses/{id}: the responses passed on, answered by the
// node that holds each or from the cache entry a replayed one came from.

// storedPath splits /v1/responses/{id}[/input_items|/cancel]; ok is false
// for anything else (an id of other characters than letters, digits and
// -_.:).
func storedPath(path string) (id, sub string, ok bool) {
	rest, _ := strings.CutPrefix(path, "/v1/responses/")
	id, sub, _ = strings.Cut(rest, "/")
	if id == "" || len(id) > 256 || (sub != "" && sub != "input_items" && sub != "cancel") {
		return "", "", false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.' || c == ':') {
			return "", "", false
		}
	}
	return id, sub, true
}

func errResponseNotFound(id, why string) *adapters.APIError {
	msg := "Response with id '" + id + "' not found."
	if why != "" {
		msg += " " + why
	}
	return &adapters.APIError{Status: 404, Type: adapters.TypeInvalidRequest, Param: "response_id", Message: msg}
}

// serveStored answers GET /v1/responses/{id} (and .../input_items),
// DELETE /v1/responses/{id} and POST /v1/responses/{id}/cancel: the
// tenant's own responses only, sent to the node that created the response
// or answered from the cache entry a replayed one came from.
func (f *responsesFeature) serveStored(ctx *fasthttp.RequestCtx, reqID string) {
	start := time.Now()
	upstream := ""
	defer func() {
		if f.conf().Logging.AccessLog {
			now := time.Now()
			telemetry.LogAccess(f.log, now, &telemetry.AccessLine{RequestID: reqID, Path: string(ctx.Path()), Status: ctx.Response.StatusCode(),
				Upstream: upstream, Duration: now.Sub(start)})
		}
	}()
	id, sub, ok := storedPath(string(ctx.Path()))
	if !ok {
		f.writeError(ctx, reply.UnknownPath(string(ctx.Path())))
		return
	}
	method := fasthttp.MethodGet
	switch sub {
	case "":
		if ctx.IsDelete() {
			method = fasthttp.MethodDelete
		} else if !ctx.IsGet() {
			ctx.Response.Header.Set(fasthttp.HeaderAllow, "GET, DELETE")
			f.writeError(ctx, &adapters.APIError{Status: 405, Type: adapters.TypeInvalidRequest, Message: "method not allowed: use GET or DELETE"})
			return
		}
	case "cancel":
		if !reply.OnlyMethod(ctx, fasthttp.MethodPost) {
			return
		}
		method = fasthttp.MethodPost
	default:
		if !reply.OnlyMethod(ctx, fasthttp.MethodGet) {
			return
		}
	}
	tenant, release, ok := f.admit(ctx)
	if !ok {
		return
	}
	defer release()
	rec := f.ids.lookup(id, tenant)
	if rec == nil {
		f.ids.unknown.Inc()
		f.writeError(ctx, errResponseNotFound(id, ""))
		return
	}
	if rec.upstream == "" {
		f.serveReplayedRecord(ctx, rec, method, sub)
		return
	}
	upstream = rec.upstream
	be := f.backend(rec.upstream)
	if be == nil {
		f.ids.gone.Inc()
		f.writeError(ctx, errResponseNotFound(id, "The upstream that created it ("+rec.upstream+") is no longer in service."))
		return
	}
	f.ids.found.Inc()
	rest := id
	if sub != "" {
		rest += "/" + sub
	}
	resp, err := be.Stored(context.Background(), method, rest, ctx.URI().QueryString(), reqID)
	if err != nil {
		f.badAnswer(reqID, rec.upstream, err)
		f.writeError(ctx, sendError(rec.upstream, err))
		return
	}
	defer resp.Close()
	setUpstream(&ctx.Response.Header, rec.upstream, 1)
	if resp.Status/100 != 2 {
		// As for any other answer: the OpenAI envelope whatever the node
		// sent (vLLM's JSON, a plain "Not Found" from an engine without
		// the route), and its 401 or 5xx as the gateway's fault.
		f.writeError(ctx, be.MapError(resp.Status, resp.Body))
		return
	}
	if method == fasthttp.MethodDelete {
		f.ids.forget(id)
	}
	ctx.SetStatusCode(resp.Status)
	ctx.Response.Header.SetContentTypeBytes(resp.ContentType)
	ctx.SetBody(resp.Body)
}

// serveReplayedRecord answers for a response the cache served: GET renders
// it again from its cache entry (while the entry lives), DELETE forgets
// the id (the entry stays: other requests share it); it has no input
// items kept and is not in the background.
func (f *responsesFeature) serveReplayedRecord(ctx *fasthttp.RequestCtx, rec *respRecord, method, sub string) {
	ctx.Response.Header.SetCanonical(headerUpstream, []byte("cache"))
	switch {
	case method == fasthttp.MethodDelete:
		f.ids.forget(rec.id)
		f.ids.found.Inc()
		ctx.SetContentType("application/json")
		ctx.SetBody(append(append([]byte(`{"id":`), adapters.AppendJSONString(nil, rec.id)...), `,"object":"response","deleted":true}`...))
		return
	case sub == "cancel":
		f.writeError(ctx, adapters.BadRequest("response_id", "Only responses created with background set to true can be cancelled; this one was served from frontdoor's cache."))
		return
	case sub == "input_items":
		f.writeError(ctx, errResponseNotFound(rec.id, "It was served from frontdoor's cache, which keeps no input items."))
		return
	}
	e := f.cache.EntryByID(context.Background(), rec.entry)
	if e == nil {
		// Served from a flight whose write-back is still under way.
		if a := f.cache.FinishedByEntry(rec.entry); a != nil {
			f.ids.found.Inc()
			ctx.Response.Header.SetCanonical(headerCacheEntry, []byte(rec.entry))
			ctx.SetContentType("application/json")
			ctx.SetBody(adapters.AppendCompletionJSON(nil, adapters.EndpointResponses, rec.id, rec.created, rec.asServed(a)))
			return
		}
		f.ids.gone.Inc()
		f.writeError(ctx, errResponseNotFound(rec.id, "It was served from frontdoor's cache, and its entry has since left the cache."))
		return
	}
	f.ids.found.Inc()
	ctx.Response.Header.SetCanonical(headerCacheEntry, []byte(e.ID))
	ctx.SetContentType("application/json")
	ctx.SetBody(adapters.AppendCompletionJSON(nil, adapters.EndpointResponses, rec.id, rec.created, rec.asServed(reuse.EntryAnswer(e))))
}

// asServed is the answer of a replayed response with the usage it was
// served with: every input token cached when it was a hit
// (docs/endpoints.md#usage-on-cache-hits). a is not changed.
func (rec *respRecord) asServed(a *adapters.Answer) *adapters.Answer {
	c := *a
	c.Usage.CachedTokens = 0
	if rec.hit {
		c.Usage.CachedTokens = c.Usage.PromptTokens
	}
	return &c
}
