package adapters

import (
	"context"
	"fmt"
	"time"

	"github.com/valyala/fasthttp"
)

// StoredResponses is a backend that answers requests about the responses
// it stored: GET /responses/{id} (and .../input_items), DELETE
// /responses/{id}, POST /responses/{id}/cancel.
type StoredResponses interface {
	Stored(ctx context.Context, method, rest string, query []byte, requestID string) (*UpstreamResponse, error)
	// MapError turns a failed answer into the OpenAI error envelope.
	MapError(status int, body []byte) *APIError
}

var _ StoredResponses = (*HTTPBackend)(nil)

// Stored sends method to the Responses URL followed by "/" + rest (the
// caller checks rest: an id, and a known sub-resource) and query, and
// reads the answer whole, within the total timeout and the answer size
// bound. The answer is passed on as it came: no check of its shape.
func (b *HTTPBackend) Stored(ctx context.Context, method, rest string, query []byte, requestID string) (*UpstreamResponse, error) {
	req := fasthttp.AcquireRequest()
	defer fasthttp.ReleaseRequest(req)
	req.Header.SetMethod(method)
	uri := b.uris[EndpointResponses] + "/" + rest
	if len(query) > 0 {
		uri += "?" + string(query)
	}
	req.SetRequestURI(uri)
	if b.auth != "" {
		req.Header.Set(fasthttp.HeaderAuthorization, b.auth)
	}
	if requestID != "" && printableASCII(requestID) {
		req.Header.SetCanonical(headerRequestID, []byte(requestID))
	}
	for k, v := range b.target.Headers {
		req.Header.Set(k, v)
	}
	wait := b.cfg.Total
	if d, ok := ctx.Deadline(); ok {
		wait = min(wait, time.Until(d))
	}
	if wait <= 0 {
		return nil, fmt.Errorf("%w before the request was sent", ErrTotalTimeout)
	}
	req.SetTimeout(wait)
	resp := fasthttp.AcquireResponse()
	if err := b.client.Do(req, resp); err != nil {
		fasthttp.ReleaseResponse(resp)
		return nil, b.classify(err, true)
	}
	return &UpstreamResponse{Status: resp.StatusCode(), ContentType: resp.Header.ContentType(), Body: resp.Body(), resp: resp}, nil
}
