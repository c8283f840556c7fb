package warm

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Headers a warm-up speaks; the gateway defines them (docs/api.md).
const (
	// HeaderCacheOnly asks for a lookup-only request: the answer comes from
	// the cache, or the response is 204 No Content; upstream is never
	// called. "1" accepts exact and semantic hits, "exact" exact ones only.
	HeaderCacheOnly = "X-Cache-Only"
	// HeaderCacheTag tags the entry a request's answer is stored as.
	HeaderCacheTag = "X-Cache-Tag"
	// HeaderTenant names the tenant of a request sent with the admin token.
	HeaderTenant = "X-Frontdoor-Tenant"
)

// HTTPTarget warms a running gateway: requests go to /v1/chat/completions,
// answered pairs to POST /admin/cache/entries.
type HTTPTarget struct {
	BaseURL    string // e.g. http://gateway:8080
	APIKey     string // the tenant's key for requests
	AdminToken string // for answered pairs and for lines that name a tenant
	Tenant     string // tenant of answered pairs that name none ("" = default)
	Tag        string // tag of the entries stored; "": TagFor(the item's file)
	Client     *http.Client
	// Retries is how often a 429 or 503 is retried (after its Retry-After,
	// at most 10 s); default 3, negative: never.
	Retries int
	// Header is sent with every chat request. The gateway warming itself
	// sends its process token there, which lets a line name its tenant
	// without the admin token.
	Header http.Header
	// Import, when set, stores answered pairs instead of POST
	// /admin/cache/entries: the gateway warming itself.
	Import func(context.Context, ImportRequest) (ImportResponse, error)
}

var _ Target = (*HTTPTarget)(nil)

// ImportRequest is the body of POST /admin/cache/entries.
type ImportRequest struct {
	Tenant  string          `json:"tenant,omitempty"`
	Tag     string          `json:"tag,omitempty"`
	Request json.RawMessage `json:"request"`
	Answer  string          `json:"answer"`
	Check   bool            `json:"check,omitempty"` // only report whether it is cached
}

// ErrImportRefused marks an import refused for its content (a 400 from a
// gateway), not for its store.
var ErrImportRefused = errors.New("import refused")

// ImportResponse is its answer: Result is "imported", "cached" or (with
// Check) "missing".
type ImportResponse struct {
	ID     string `json:"id,omitempty"`
	Result string `json:"result"`
}

func (h *HTTPTarget) client() *http.Client {
	if h.Client != nil {
		return h.Client
	}
	return http.DefaultClient
}

func (h *HTTPTarget) tag(it *Item) string {
	if h.Tag != "" {
		return h.Tag
	}
	return TagFor(it.File)
}

// Lookup implements Target.
func (h *HTTPTarget) Lookup(ctx context.Context, it *Item) (bool, error) {
	if it.Kind == KindPair {
		r, err := h.importPair(ctx, it, true)
		return r == "cached", err
	}
	resp, body, err := h.chat(ctx, it, true)
	if err != nil {
		return false, err
	}
	switch resp.StatusCode {
	case http.StatusOK:
		return true, nil
	case http.StatusNoContent:
		return false, nil
	}
	return false, httpError("lookup", resp, body)
}

// Warm implements Target.
func (h *HTTPTarget) Warm(ctx context.Context, it *Item) (Result, error) {
	if it.Kind == KindPair {
		r, err := h.importPair(ctx, it, false)
		if r == "cached" {
			return Cached, err
		}
		return Warmed, err
	}
	resp, body, err := h.chat(ctx, it, false)
	if err != nil {
		return 0, err
	}
	if resp.StatusCode != http.StatusOK {
		return 0, httpError("request", resp, body)
	}
	switch xc := resp.Header.Get("X-Cache"); xc {
	case "miss":
		return Warmed, nil
	case "hit-exact", "hit-semantic":
		return Cached, nil
	default:
		return 0, fmt.Errorf("answered but not cached (X-Cache: %q): is the request cacheable (temperature, n, no-store)?", xc)
	}
}

func (h *HTTPTarget) chat(ctx context.Context, it *Item, lookup bool) (*http.Response, []byte, error) {
	hdr := http.Header{"Content-Type": {"application/json"}}
	for k, v := range h.Header {
		hdr[k] = v
	}
	if it.Tenant != "" {
		switch {
		case h.AdminToken != "":
			hdr.Set("Authorization", "Bearer "+h.AdminToken)
		case len(h.Header) == 0:
			return nil, nil, fmt.Errorf("the line names tenant %q: that needs the admin token (--admin-token)", it.Tenant)
		}
		hdr.Set(HeaderTenant, it.Tenant)
	} else if h.APIKey != "" {
		hdr.Set("Authorization", "Bearer "+h.APIKey)
	}
	if lookup {
		hdr.Set(HeaderCacheOnly, "1")
	} else if tag := h.tag(it); tag != "" {
		hdr.Set(HeaderCacheTag, tag)
	}
	return h.do(ctx, http.MethodPost, "/v1/chat/completions", hdr, it.Request)
}

func (h *HTTPTarget) importPair(ctx context.Context, it *Item, check bool) (string, error) {
	tenant := it.Tenant
	if tenant == "" {
		tenant = h.Tenant
	}
	in := ImportRequest{Tenant: tenant, Tag: h.tag(it), Request: it.Request, Answer: it.Answer, Check: check}
	if h.Import != nil {
		r, err := h.Import(ctx, in)
		return r.Result, err
	}
	b, _ := json.Marshal(in)
	hdr := http.Header{"Content-Type": {"application/json"}}
	if h.AdminToken != "" {
		hdr.Set("Authorization", "Bearer "+h.AdminToken)
	}
	resp, body, err := h.do(ctx, http.MethodPost, "/admin/cache/entries", hdr, b)
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", httpError("import", resp, body)
	}
	var r ImportResponse
	if err := json.Unmarshal(body, &r); err != nil {
		return "", fmt.Errorf("import: bad answer: %w", err)
	}
	return r.Result, nil
}

// do sends one request, retrying 429 and 503 answers.
func (h *HTTPTarget) do(ctx context.Context, method, path string, hdr http.Header, body []byte) (*http.Response, []byte, error) {
	retries := h.Retries
	switch {
	case retries == 0:
		retries = 3
	case retries < 0:
		retries = 0
	}
	url := strings.TrimRight(h.BaseURL, "/") + path
	for attempt := 0; ; attempt++ {
		req, err := http.NewRequestWithContext(ctx, method, url, bytes.NewReader(body))
		if err != nil {
			return nil, nil, err
		}
		req.Header = hdr.Clone()
		resp, err := h.client().Do(req)
		if err != nil {
			return nil, nil, err
		}
		b, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
		resp.Body.Close()
		if err != nil {
			return nil, nil, fmt.Errorf("read answer: %w", err)
		}
		if (resp.StatusCode != http.StatusTooManyRequests && resp.StatusCode != http.StatusServiceUnavailable) || attempt >= retries {
			return resp, b, nil
		}
		wait := time.Second
		if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && s >= 0 {
			wait = min(time.Duration(s)*time.Second, 10*time.Second)
		}
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return nil, nil, ctx.Err()
		}
	}
}

// httpError turns an error answer into an error with the gateway's message.
func httpError(what string, resp *http.Response, body []byte) error {
	var e struct {
		Error struct {
			Message string `json:"message"`
		} `json:"error"`
	}
	msg := strings.TrimSpace(string(body))
	if json.Unmarshal(body, &e) == nil && e.Error.Message != "" {
		msg = e.Error.Message
	}
	if len(msg) > 200 {
		msg = msg[:200] + "..."
	}
	return fmt.Errorf("%s: HTTP %d: %s", what, resp.StatusCode, msg)
}

// FetchHot downloads GET /admin/cache/hot?top=N, a chat-request JSONL of the
// most-hit entries (of tenant only, and without the tenant field, unless
// tenant is "").
func FetchHot(ctx context.Context, c *http.Client, baseURL, adminToken string, top int, tenant string) ([]byte, error) {
	if c == nil {
		c = http.DefaultClient
	}
	q := url.Values{"top": {strconv.Itoa(top)}}
	if tenant != "" {
		q.Set("tenant", tenant)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimRight(baseURL, "/")+"/admin/cache/hot?"+q.Encode(), nil)
	if err != nil {
		return nil, err
	}
	if adminToken != "" {
		req.Header.Set("Authorization", "Bearer "+adminToken)
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, httpError("export", resp, b)
	}
	return b, nil
}
