package router

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"frontdoor/adapters"
	"frontdoor/balancer"
	sim "frontdoor/internal/gpusim"
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

// An engine (or a proxy in front of it) that answers a stream:false
// request with an event stream: the client gets the one chat.completion
// JSON it asked for, which the cache stores like any other; a stream that
// is not whole and clean is a failed attempt (retried, else a 502).
func TestEventStreamForJSONRequest(t *testing.T) {
	node := startNode(t, func(body []byte, w io.Writer) bool {
		events := evPartial + evTail + evUsage + evDone
		if bytes.Contains(body, []byte("broken")) {
			events = evPartial + "event: error\ndata: {\"message\":\"bad node\"}\n\n" + evTail + evDone
		}
		_, err := io.WriteString(w, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream; charset=utf-8\r\nContent-Length: "+strconv.Itoa(len(events))+"\r\n\r\n"+events)
		return err == nil
	})
	gw := startGateway(t, oneNodeConfig(node.URL()))
	body := chatBody("convert me", "")
	resp, b := post(t, gw.URL+"/v1/chat/completions", body)
	var cc adapters.ChatCompletion
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") || json.Unmarshal(b, &cc) != nil ||
		cc.Object != "chat.completion" || cc.ID != "c1" || len(cc.Choices) != 1 || cc.Choices[0].Message.Content == nil ||
		*cc.Choices[0].Message.Content != "Partial answer tail" || cc.Choices[0].FinishReason != "stop" || cc.Usage == nil || cc.Usage.TotalTokens != 7 {
		t.Fatalf("%d %s: %s", resp.StatusCode, resp.Header.Get("Content-Type"), b)
	}
	eventuallyHit(t, gw, body, "hit-exact")
	if v := metricValue(t, metricsText(t, gw), `frontdoor_upstream_bad_answers_total{reason="sse_converted"}`); v != 1 {
		t.Fatalf("sse_converted = %v", v)
	}

	// Broken, with a good node beside it: retried there.
	good := testenv.GPUSim(t, func(c *sim.Config) { c.TTFT, c.ITL = 0, 0 })
	gw2 := startGateway(t, twoNodeConfig(node.URL(), good))
	resp, b = post(t, gw2.URL+"/v1/chat/completions", chatBody("broken", ""))
	if resp.StatusCode != 200 || resp.Header.Get("X-Upstream") != "gpu-a" || resp.Header.Get("X-Upstream-Attempts") != "2" || strings.Contains(string(b), "bad node") {
		t.Fatalf("broken, beside a good node: %d from %s: %s", resp.StatusCode, resp.Header.Get("X-Upstream"), b)
	}
	// Alone: a 502.
	resp, b = post(t, gw.URL+"/v1/chat/completions", chatBody("broken", ""))
	if resp.StatusCode != 502 || !strings.Contains(string(b), "malformed answer") {
		t.Fatalf("broken, alone: %d %s", resp.StatusCode, b)
	}
}

// A node's answer read whole is bounded by limits.max_upstream_body_bytes:
// past it the client gets a 502 at once, the rest is never read (the
// connection is closed), no other node is tried, and it is counted and
// logged with the node's name but not the body.
func TestUpstreamAnswerTooLarge(t *testing.T) {
	const declared = 100 << 20
	for _, c := range []struct {
		name   string
		stream bool
		head   string
		chunk  func(string) string
	}{
		{"Content-Length", false, "Content-Length: " + strconv.Itoa(declared), func(s string) string { return s }},
		{"chunked", false, "Transfer-Encoding: chunked", sseChunk},
		{"JSON for a stream", true, "Content-Length: " + strconv.Itoa(declared), func(s string) string { return s }},
	} {
		t.Run(c.name, func(t *testing.T) {
			var written atomic.Int64
			cut := make(chan bool, 1)
			node := startScriptedNode(t, func(w io.Writer) bool {
				if _, err := io.WriteString(w, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"+c.head+"\r\n\r\n"+c.chunk(`{"choices":[{"index":0,"message":{"content":"`)); err != nil {
					cut <- true
					return false
				}
				piece := c.chunk(strings.Repeat("x", 32<<10))
				for written.Load() < declared {
					if _, err := io.WriteString(w, piece); err != nil {
						cut <- true
						return false
					}
					written.Add(int64(len(piece)))
				}
				cut <- false
				return false
			})
			good := testenv.GPUSim(t, func(c *sim.Config) { c.TTFT, c.ITL = 0, 0 })
			cfg := twoNodeConfig(node.URL(), good) // tries the big node first
			cfg.Limits.MaxUpstreamBodyBytes = 64 << 10
			gw := startGateway(t, cfg)
			extra := ""
			if c.stream {
				extra = `"stream":true`
			}
			start := time.Now()
			resp, b := post(t, gw.URL+"/v1/chat/completions", chatBody("a long one", extra))
			if resp.StatusCode != 502 || !strings.Contains(string(b), "limits.max_upstream_body_bytes") {
				t.Fatalf("%d: %s", resp.StatusCode, b)
			}
			if d := time.Since(start); d > 5*time.Second {
				t.Fatalf("the 502 took %s", d)
			}
			select {
			case wasCut := <-cut:
				if !wasCut {
					t.Fatal("the gateway read the whole answer")
				}
			case <-time.After(10 * time.Second):
				t.Fatal("the node's connection was never closed")
			}
			if n := written.Load(); n > 16<<20 {
				t.Fatalf("the node wrote %d bytes before the connection closed", n)
			}
			if len(good.Requests()) != 0 {
				t.Fatal("a too large answer was retried on another node")
			}
			if v := metricValue(t, metricsText(t, gw), `frontdoor_upstream_bad_answers_total{reason="too_large"}`); v != 1 {
				t.Fatalf("too_large = %v", v)
			}
			logs := gw.Logs.String()
			if !strings.Contains(logs, `"msg":"upstream answer refused","reason":"too_large","node":"gpu-b"`) || strings.Contains(logs, "xxxxxxxx") {
				t.Fatalf("the WARN line is missing or quotes the body:\n%.2000s", logs)
			}
		})
	}
}

// A node cut by timeouts.total is said to be: in the error event that ends
// a stream, in the log line, and in the 504 a client gets when nothing was
// sent yet (a non-streaming answer, or a stream whose first event is not
// there by the total deadline, before the first-byte one).
func TestTotalTimeoutIsCalledTotal(t *testing.T) {
	trickle := startScriptedNode(t, func(w io.Writer) bool {
		if _, err := io.WriteString(w, sseHead+sseChunk(evPartial)); err != nil {
			return false
		}
		for range 100 { // never idle for long, never done
			time.Sleep(100 * time.Millisecond)
			if _, err := io.WriteString(w, sseChunk(evPartial)); err != nil {
				return false
			}
		}
		return false
	})
	cfg := oneNodeConfig(trickle.URL())
	cfg.Timeouts.Idle, cfg.Timeouts.Total = units.Duration(500*time.Millisecond), units.Duration(800*time.Millisecond)
	gw := startGateway(t, cfg)
	resp, b := post(t, gw.URL+"/v1/chat/completions", chatBody("endless", `"stream":true`))
	last := string(b[bytes.LastIndex(b[:len(b)-2], []byte("\n\n"))+2:])
	if resp.StatusCode != 200 || !strings.Contains(last, "timeouts.total reached (800ms)") || strings.Contains(last, "idle") {
		t.Fatalf("%d, last event %q", resp.StatusCode, last)
	}
	if logs := gw.Logs.String(); !strings.Contains(logs, `"msg":"upstream stream broke"`) || !strings.Contains(logs, "timeouts.total reached") {
		t.Fatalf("log:\n%s", logs)
	}

	silent := startScriptedNode(t, func(w io.Writer) bool {
		time.Sleep(3 * time.Second)
		return false
	})
	headersOnly := startScriptedNode(t, func(w io.Writer) bool {
		_, _ = io.WriteString(w, sseHead)
		time.Sleep(3 * time.Second)
		return false
	})
	for _, c := range []struct {
		name, url, extra string
	}{
		{"non-streaming", silent.URL(), ""},
		{"no first event", headersOnly.URL(), `"stream":true`},
	} {
		cfg := oneNodeConfig(c.url)
		cfg.Timeouts.Total = units.Duration(300 * time.Millisecond) // before first_byte (60s)
		gw := startGateway(t, cfg)
		start := time.Now()
		resp, b := post(t, gw.URL+"/v1/chat/completions", chatBody("slow", c.extra))
		if resp.StatusCode != 504 || !strings.Contains(string(b), "timeouts.total reached (300ms)") || time.Since(start) > 2*time.Second {
			t.Fatalf("%s: %d after %s: %s", c.name, resp.StatusCode, time.Since(start), b)
		}
	}
}
