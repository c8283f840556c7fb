package adapters

import (
	"bytes"
	"context"
	"fmt"
	"strings"

	"github.com/valyala/fastjson"
)

// DashScopeRegions are the base URLs of Alibaba Cloud Model Studio's
// OpenAI-compatible mode.
var DashScopeRegions = map[string]string{
	"beijing":   "https://dashscope.aliyuncs.com/compatible-mode/v1",
	"singapore": "https://dashscope-intl.aliyuncs.com/compatible-mode/v1",
	"us":        "https://dashscope-us.aliyuncs.com/compatible-mode/v1",
}

// DashScopeResponsesURL is the URL of DashScope's OpenAI-compatible
// Responses API for a base URL: DashScope serves it under
// /api/v2/apps/protocols/compatible-mode/v1 rather than the chat API's
// /compatible-mode/v1. For any other base URL it is "" (the base URL's
// /responses).
func DashScopeResponsesURL(base string) string {
	b := strings.TrimSuffix(base, "/")
	for _, region := range DashScopeRegions {
		if b == region {
			return strings.TrimSuffix(b, "/compatible-mode/v1") + "/api/v2/apps/protocols/compatible-mode/v1/responses"
		}
	}
	return ""
}

// DashScope speaks to DashScope's OpenAI-compatible mode (hosted Qwen). On
// top of the OpenAI protocol it:
//   - maps model names through ModelMap, and shows the client the model it
//     asked for (the real one is in UpstreamResponse.Model);
//   - sets "enable_thinking": false on non-streaming requests that don't set
//     it, since DashScope answers those with a 400 otherwise;
//   - asks for stream_options.include_usage on streams (the caller strips
//     the usage chunk for clients that did not ask);
//   - maps its error codes (Throttling.* → 429, invalid_parameter_error →
//     400, auth errors → 502 without the key).
type DashScope struct {
	*HTTPBackend
	modelMap map[string]string
	quirks   bool // DashScope itself; false for a plain OpenAI-compatible hosted API
}

var _ Backend = (*DashScope)(nil)

// NewDashScope builds the backend. t.URL is a base URL. With t.Kind
// "openai" it talks to any OpenAI-compatible hosted API: the model map and
// the forced usage chunk apply, DashScope's enable_thinking rule does not.
func NewDashScope(t Target, cfg Config, modelMap map[string]string) (*DashScope, error) {
	if t.Kind == "" {
		t.Kind = KindDashScope
	}
	hb, err := NewHTTPBackend(t, cfg)
	if err != nil {
		return nil, err
	}
	return &DashScope{HTTPBackend: hb, modelMap: modelMap, quirks: t.Kind == KindDashScope}, nil
}

// UpstreamModel returns the hosted model a local model name maps to.
func (d *DashScope) UpstreamModel(model string) string {
	if m, ok := d.modelMap[model]; ok {
		return m
	}
	return model
}

// Send rewrites the request for DashScope and sends it.
func (d *DashScope) Send(ctx context.Context, ur *UpstreamRequest) (*UpstreamResponse, error) {
	body, err := d.rewrite(ur)
	if err != nil {
		return nil, err
	}
	out := *ur
	out.Body = body
	resp, err := d.HTTPBackend.Send(ctx, &out)
	if err != nil {
		return nil, err
	}
	resp.Model = d.UpstreamModel(ur.Model)
	if resp.Model != ur.Model && ur.Model != "" {
		resp.renameModel(resp.Model, ur.Model)
	}
	return resp, nil
}

func (d *DashScope) rewrite(ur *UpstreamRequest) ([]byte, error) {
	v, err := fastjson.ParseBytes(ur.Body)
	if err != nil {
		return nil, fmt.Errorf("dashscope: request body: %w", err)
	}
	var a fastjson.Arena
	if ur.Model != "" {
		v.Set("model", a.NewString(d.UpstreamModel(ur.Model)))
	}
	if ur.Endpoint == EndpointResponses {
		// Its stream ends with response.completed, which carries the
		// usage; enable_thinking's rule is the chat API's.
		return AppendJSONValue(nil, v), nil
	}
	if d.quirks && !ur.Stream && v.Get("enable_thinking") == nil {
		v.Set("enable_thinking", a.NewFalse())
	}
	if ur.Stream {
		so := v.Get("stream_options")
		if so == nil || so.Type() != fastjson.TypeObject {
			so = a.NewObject()
			v.Set("stream_options", so)
		}
		so.Set("include_usage", a.NewTrue())
	}
	return AppendJSONValue(nil, v), nil
}

// renameModel makes the answer show the model the client asked for.
func (r *UpstreamResponse) renameModel(from, to string) {
	r.modelFrom = []byte(`"model":"` + jsonEscapeSimple(from) + `"`)
	r.modelTo = []byte(`"model":"` + jsonEscapeSimple(to) + `"`)
	if r.Body != nil {
		r.Body = bytes.ReplaceAll(r.Body, r.modelFrom, r.modelTo)
	}
}

func jsonEscapeSimple(s string) string {
	q := string(AppendJSONString(nil, s))
	return strings.TrimSuffix(strings.TrimPrefix(q, `"`), `"`)
}
