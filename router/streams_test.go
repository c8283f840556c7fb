package router

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

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

// Events are written to the client in batches, flushed before each read of
// the node's socket: an event must still reach the client before the node
// sends the next one, however the node cut its writes (an event per chunk,
// several in one chunk, one split across chunks and writes).
func TestStreamEventReachesClientBeforeNextIsSent(t *testing.T) {
	event := func(i int) string {
		return fmt.Sprintf(`data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"qwen3-8b","choices":[{"index":0,"delta":{"content":"t%d "},"finish_reason":null}]}`, i) + "\n\n"
	}
	chunk := func(s string) string { return strconv.FormatInt(int64(len(s)), 16) + "\r\n" + s + "\r\n" }
	// What the node writes, one write each; after each write but the last
	// it waits until the client has every event written so far.
	writes := []string{
		"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n" + chunk(event(0)),
		chunk(event(1)),
		chunk(event(2) + event(3)),        // two events in one chunk
		chunk(event(4)) + chunk(event(5)), // two chunks in one write
		chunk(event(6)[:40]),              // an event split across writes
		chunk(event(6)[40:]),
		chunk(event(7)[:30]) + chunk(event(7)[30:]), // split across chunks, one write
		chunk("data: [DONE]\n\n") + "0\r\n\r\n",
	}
	wantAfter := []int{1, 2, 4, 6, 6, 7, 8} // events the client must hold after write i
	got := make(chan int, 16)               // events the client has seen so far
	nodeErr := make(chan error, 1)
	node := startScriptedNode(t, func(w io.Writer) bool {
		seen := 0
		for i, wr := range writes {
			if _, err := io.WriteString(w, wr); err != nil {
				nodeErr <- err
				return false
			}
			if i == len(writes)-1 {
				break
			}
			deadline := time.After(5 * time.Second)
			for seen < wantAfter[i] {
				select {
				case seen = <-got:
				case <-deadline:
					nodeErr <- fmt.Errorf("after write %d the client had %d events, want %d: events wait for the next ones", i, seen, wantAfter[i])
					return false
				}
			}
		}
		nodeErr <- nil
		return true
	})
	cfg := testConfig()
	cfg.Nodes = []balancer.NodeConfig{{Name: "gpu-a", URL: node.URL(), Kind: "vllm", Models: []string{"qwen3-8b"}, MaxConcurrency: 10, Weight: 1}}
	gw := startGateway(t, cfg)
	req, _ := http.NewRequest(http.MethodPost, gw.URL+"/v1/chat/completions", strings.NewReader(chatBody("lockstep", `"stream":true`)))
	req.Header.Set("Content-Type", "application/json")
	resp, err := httpClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body strings.Builder
	br := bufio.NewReader(resp.Body)
	n := 0
	for {
		line, err := br.ReadString('\n')
		body.WriteString(line)
		if line == "\n" {
			n++
			got <- n
		}
		if err != nil {
			break
		}
	}
	if err := <-nodeErr; err != nil {
		t.Fatal(err)
	}
	var want strings.Builder
	for i := 0; i < 8; i++ {
		want.WriteString(event(i))
	}
	want.WriteString("data: [DONE]\n\n")
	if body.String() != want.String() {
		t.Fatalf("client got\n%s\nwant\n%s", body.String(), want.String())
	}
}
