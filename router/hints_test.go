package router

import (
	"strings"
	"testing"
)

// A request sent to the wrong place is told where it belongs: a path
// without /v1, a chat body with prompt, a completions body with messages.
func TestWrongEndpointHints(t *testing.T) {
	gw, sims := simAndGateway(t, 1, nil)
	for _, c := range []struct {
		path, body string
		status     int
		want       string
	}{
		{"/chat/completions", `{"model":"qwen3-8b","messages":[{"role":"user","content":"hi"}]}`, 404, `did you mean \"/v1/chat/completions\"?`},
		{"/embeddings", `{"model":"qwen3-8b","input":"hi"}`, 404, `did you mean \"/v1/embeddings\"?`},
		{"/v1/chat/completions", `{"model":"qwen3-8b","prompt":"hi"}`, 400, "send it to /v1/completions"},
		{"/v1/completions", `{"model":"qwen3-8b","messages":[{"role":"user","content":"hi"}]}`, 400, "send it to /v1/chat/completions"},
	} {
		resp, b := post(t, gw.URL+c.path, c.body)
		if resp.StatusCode != c.status || !strings.Contains(string(b), c.want) {
			t.Errorf("POST %s %s: %d %s, want %d with %q", c.path, c.body, resp.StatusCode, b, c.status, c.want)
		}
	}
	if got := sims[0].Stats().Received; got != 0 {
		t.Errorf("the node got %d of these requests", got)
	}
}
