package router

import (
	"strconv"
	"strings"
	"testing"

	"frontdoor/balancer"
)

// The buffers of the stream path are small (the server hands its 16 KiB
// read buffer back after the request, the upstream connection reads through
// 4 KiB, the SSE reader holds 2 KiB, the client's writer buffers 2 KiB
// between flushes): a 12 KB request header, a 3 KB upstream header and a
// 1 MB SSE event still pass whole, in order.
func TestStreamLargeHeadersAndLongEvent(t *testing.T) {
	big := `{"id":"c1","object":"chat.completion.chunk","created":1,"model":"qwen3-8b","choices":[{"index":0,"delta":{"content":"` +
		strings.Repeat("x", 1<<20) + `"},"finish_reason":null}]}`
	small := `{"id":"c1","object":"chat.completion.chunk","created":1,"model":"qwen3-8b","choices":[{"index":0,"delta":{"content":"end"},"finish_reason":"stop"}]}`
	events := "data: " + big + "\n\n" + "data: " + small + "\n\n" + "data: [DONE]\n\n"
	answer := "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nX-Padding: " + strings.Repeat("p", 3<<10) + "\r\n" +
		"Transfer-Encoding: chunked\r\n\r\n" +
		strconv.FormatInt(int64(len(events)), 16) + "\r\n" + events + "\r\n0\r\n\r\n"
	node := startFakeNode(t, answer, true)
	cfg := testConfig()
	cfg.Nodes = []balancer.NodeConfig{{Name: "gpu-a", URL: node.URL(), Kind: "vllm", Models: []string{"qwen3-8b"}, MaxConcurrency: 10, Weight: 1}}
	gw := startGateway(t, cfg)
	for i := 0; i < 2; i++ { // the second request reuses pooled buffers
		resp, b := post(t, gw.URL+"/v1/chat/completions", chatBody("long", `"stream":true`), "X-Big", strings.Repeat("h", 12<<10))
		if resp.StatusCode != 200 {
			t.Fatalf("status %d: %.300s", resp.StatusCode, b)
		}
		if string(b) != events {
			t.Fatalf("got %d bytes, want the upstream's %d unchanged; starts %.200q, ends %q", len(b), len(events), b, b[max(0, len(b)-200):])
		}
	}
}
