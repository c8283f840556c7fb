package router

import (
	"bufio"
	"bytes"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"frontdoor/balancer"
	"frontdoor/internal/testenv"
	"frontdoor/internal/units"
)

// Stream events of a scripted node's answers.
const (
	evPartial = `data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"qwen3-8b","choices":[{"index":0,"delta":{"content":"Partial answer "},"finish_reason":null}]}` + "\n\n"
	evTail    = `data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"qwen3-8b","choices":[{"index":0,"delta":{"content":"tail"},"finish_reason":"stop"}]}` + "\n\n"
	evUsage   = `data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"qwen3-8b","choices":[],"usage":{"prompt_tokens":5,"completion_tokens":2,"total_tokens":7}}` + "\n\n"
	evDone    = "data: [DONE]\n\n"
	sseHead   = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
)

// sseChunk frames s as one chunk of a chunked body.
func sseChunk(s string) string { return strconv.FormatInt(int64(len(s)), 16) + "\r\n" + s + "\r\n" }

// sseAnswer is a whole chunked event-stream answer.
func sseAnswer(events string) string { return sseHead + sseChunk(events) + "0\r\n\r\n" }

// oneNodeConfig has the node at url as gpu-a, alone, with the cache on.
func oneNodeConfig(url string) Config {
	cfg := testConfig()
	cfg.Cache.Backend = "memory"
	cfg.Nodes = []balancer.NodeConfig{{Name: "gpu-a", URL: url, Kind: "vllm", Models: []string{"qwen3-8b"}, MaxConcurrency: 10, Weight: 1}}
	return cfg
}

// A streamed answer is stored only when it is whole and clean. A node sent
// "Partial answer ", then an error, then "tail" with finish_reason stop and
// [DONE]: the client sees the stream as the node sent it, and the next
// identical request goes upstream again instead of getting "Partial answer
// tail" from the cache. So for the other ways an engine reports an error,
// and for a stream without [DONE] or finish_reason, cut, stalled or left
// by its client. Each is counted and logged.
func TestUncleanStreamsAreNotCached(t *testing.T) {
	closeAfter := func(events string) func(io.Writer) bool {
		return func(w io.Writer) bool {
			_, _ = io.WriteString(w, sseHead+sseChunk(events))
			return false // closed before the last chunk
		}
	}
	stallAfter := func(events string) func(io.Writer) bool {
		return func(w io.Writer) bool {
			_, _ = io.WriteString(w, sseHead+sseChunk(events))
			time.Sleep(time.Second) // past timeouts.idle
			return false
		}
	}
	whole := func(events string) func(io.Writer) bool {
		return func(w io.Writer) bool {
			_, err := io.WriteString(w, sseAnswer(events))
			return err == nil
		}
	}
	cases := []struct {
		name, reason string
		node         func(io.Writer) bool
		passThrough  string // what the client must get, byte for byte; "" to skip
		leave        bool   // the client leaves after the first event
		warns        bool   // a WARN line names the node
	}{
		{name: "event: error", reason: "stream_error", warns: true,
			node:        whole(evPartial + "event: error\ndata: {\"message\":\"engine dead\"}\n\n" + evTail + evDone),
			passThrough: evPartial + "event: error\ndata: {\"message\":\"engine dead\"}\n\n" + evTail + evDone},
		{name: "error object (SGLang, vLLM)", reason: "stream_error", warns: true,
			node:        whole(evPartial + `data: {"error":{"message":"engine dead","type":"InternalServerError","code":500}}` + "\n\n" + evTail + evDone),
			passThrough: evPartial + `data: {"error":{"message":"engine dead","type":"InternalServerError","code":500}}` + "\n\n" + evTail + evDone},
		{name: "vLLM object error", reason: "stream_error", warns: true,
			node:        whole(evPartial + `data: {"object":"error","message":"engine dead","type":"InternalServerError","param":null,"code":500}` + "\n\n" + evTail + evDone),
			passThrough: evPartial + `data: {"object":"error","message":"engine dead","type":"InternalServerError","param":null,"code":500}` + "\n\n" + evTail + evDone},
		{name: "no [DONE]", reason: "stream_incomplete", warns: true, node: whole(evPartial + evTail), passThrough: evPartial + evTail},
		{name: "no finish_reason", reason: "stream_incomplete", warns: true, node: whole(evPartial + evDone), passThrough: evPartial + evDone},
		{name: "cut", reason: "stream_cut", node: closeAfter(evPartial + evTail)},
		{name: "idle", reason: "stream_cut", node: stallAfter(evPartial + evTail)},
		{name: "client gone", reason: "client_gone", leave: true, node: func(w io.Writer) bool {
			if _, err := io.WriteString(w, sseHead+sseChunk(evPartial)); err != nil {
				return false
			}
			for range 100 { // until the gateway stops reading
				time.Sleep(20 * time.Millisecond)
				if _, err := io.WriteString(w, sseChunk(evPartial)); err != nil {
					return false
				}
			}
			_, _ = io.WriteString(w, sseChunk(evTail+evDone)+"0\r\n\r\n")
			return false
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var bad atomic.Int64
			node := startNode(t, func(body []byte, w io.Writer) bool {
				if bytes.Contains(body, []byte("control")) {
					_, err := io.WriteString(w, sseAnswer(evPartial+evTail+evUsage+evDone))
					return err == nil
				}
				bad.Add(1)
				return c.node(w)
			})
			cfg := oneNodeConfig(node.URL())
			cfg.Timeouts.Idle = units.Duration(300 * time.Millisecond)
			cfg.Cache.Coalesce = false // every miss goes to the node, none follows another's flight
			gw := startGateway(t, cfg)
			body := chatBody("an unlucky question", `"stream":true`)

			if c.leave {
				leaveAfterFirstEvent(t, gw.URL+"/v1/chat/completions", body)
				testenv.Eventually(t, 5*time.Second, func() bool {
					return metricValue(t, metricsText(t, gw), `frontdoor_client_aborts_total`) == 1
				}, "the gateway never saw the client leave")
			} else {
				resp, b := post(t, gw.URL+"/v1/chat/completions", body)
				if resp.StatusCode != 200 || resp.Header.Get("X-Cache") != "miss" {
					t.Fatalf("first: %d X-Cache %q: %s", resp.StatusCode, resp.Header.Get("X-Cache"), b)
				}
				if c.passThrough != "" && string(b) != c.passThrough {
					t.Fatalf("the client got\n%q\nnot the node's stream\n%q", b, c.passThrough)
				}
			}

			// A clean answer after it is stored (so write-backs are done)...
			control := chatBody("control", `"stream":true`)
			post(t, gw.URL+"/v1/chat/completions", control)
			testenv.Eventually(t, 3*time.Second, func() bool {
				resp, _ := post(t, gw.URL+"/v1/chat/completions", control, "X-Cache-Only", "1")
				return resp.StatusCode == 200
			}, "the clean answer was never stored")
			// ...but not this one: a lookup-only request finds nothing (for
			// a while: a write-back may embed first), and the request goes
			// to the node again.
			for end := time.Now().Add(300 * time.Millisecond); time.Now().Before(end); time.Sleep(30 * time.Millisecond) {
				if resp, b := post(t, gw.URL+"/v1/chat/completions", body, "X-Cache-Only", "1"); resp.StatusCode != 204 {
					t.Fatalf("the unclean answer is in the cache: %d X-Cache %q: %.300s", resp.StatusCode, resp.Header.Get("X-Cache"), b)
				}
			}
			if !c.leave {
				if resp, b := post(t, gw.URL+"/v1/chat/completions", body); resp.Header.Get("X-Cache") != "miss" || bad.Load() != 2 {
					t.Fatalf("again: X-Cache %q after %d upstream calls: %s", resp.Header.Get("X-Cache"), bad.Load(), b)
				}
			}
			series := `frontdoor_cache_writes_dropped_total{reason="` + c.reason + `"}`
			if v := metricValue(t, metricsText(t, gw), series); v < 1 {
				t.Fatalf("%s = %v", series, v)
			}
			logs := gw.Logs.String()
			if c.warns && !strings.Contains(logs, `"level":"WARN","msg":"upstream stream not clean; its answer is not cached","reason":"`+c.reason+`","node":"gpu-a"`) {
				t.Fatalf("no WARN line names the node:\n%s", logs)
			}
		})
	}
}

// leaveAfterFirstEvent sends a streaming request and hangs up once the
// first event has arrived.
func leaveAfterFirstEvent(t *testing.T, url, body string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	resp, err := httpClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(resp.Body).ReadString('\n')
	if err != nil || !strings.Contains(line, "Partial answer") {
		t.Fatalf("first line %q: %v", line, err)
	}
	resp.Body.Close() // unread: the connection closes
}
