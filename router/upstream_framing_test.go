package router

import (
	"bufio"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"frontdoor/balancer"
	sim "frontdoor/internal/gpusim"
	"frontdoor/internal/testenv"
)

// fakeNode is a node that answers every POST with the same canned bytes,
// then closes the connection (or, with hold, leaves it open); GETs (health
// probes, metric scrapes) get an empty 200.
type fakeNode struct {
	ln       net.Listener
	requests atomic.Int64
}

func startFakeNode(t *testing.T, answer string, hold bool) *fakeNode {
	return startScriptedNode(t, func(w io.Writer) bool {
		_, err := io.WriteString(w, answer)
		return err == nil && hold
	})
}

// startScriptedNode is a node whose POSTs answer writes to the connection,
// which stays open for the next request while answer returns true; GETs
// get an empty 200.
func startScriptedNode(t *testing.T, answer func(w io.Writer) bool) *fakeNode {
	t.Helper()
	return startNode(t, func(_ []byte, w io.Writer) bool { return answer(w) })
}

// startNode is startScriptedNode whose answer also gets the request body.
func startNode(t *testing.T, answer func(body []byte, w io.Writer) bool) *fakeNode {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeNode{ln: ln}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				br := bufio.NewReader(c)
				for {
					req, err := http.ReadRequest(br)
					if err != nil {
						return
					}
					body, _ := io.ReadAll(req.Body)
					if req.Method != http.MethodPost { // health probes and metric scrapes pass
						if _, err := io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"); err != nil {
							return
						}
						continue
					}
					f.requests.Add(1)
					if !answer(body, c) {
						return
					}
				}
			}()
		}
	}()
	return f
}

func (f *fakeNode) URL() string { return "http://" + f.ln.Addr().String() }

// A node whose answer is malformed is treated like one that failed: the
// request goes to another node while nothing has reached the client, or,
// with no other node, the client gets a clean 502 in the OpenAI format.
// Never is the malformed answer passed on.
func TestUpstreamMalformedAnswers(t *testing.T) {
	completion := `{"id":"x","object":"chat.completion","created":1,"model":"qwen3-8b","choices":[{"index":0,"message":{"role":"assistant","content":"bad node"},"finish_reason":"stop"}],"usage":{"prompt_tokens":1,"completion_tokens":2,"total_tokens":3}}`
	jsonHead := "Content-Type: application/json\r\n"
	cl := "Content-Length: " + strconv.Itoa(len(completion)) + "\r\n"
	cases := []struct {
		name, answer string
		hold         bool // keep the connection open after the answer
	}{
		{"conflicting Content-Length", "HTTP/1.1 200 OK\r\n" + jsonHead + cl + "Content-Length: 5\r\n\r\n" + completion, false},
		{"duplicate Content-Length", "HTTP/1.1 200 OK\r\n" + jsonHead + cl + cl + "\r\n" + completion, false},
		{"bad status line", "HTTP/1.1 2OO OK\r\n" + jsonHead + cl + "\r\n" + completion, false},
		{"not HTTP", "SSH-2.0-OpenSSH_9.6\r\n", false},
		{"Transfer-Encoding: gzip, chunked", "HTTP/1.1 200 OK\r\n" + jsonHead + "Transfer-Encoding: gzip, chunked\r\n\r\n" + chunked(completion), true},
		{"Transfer-Encoding: gzip", "HTTP/1.1 200 OK\r\n" + jsonHead + "Transfer-Encoding: gzip\r\n\r\n" + completion, false},
		{"body cut short", "HTTP/1.1 200 OK\r\n" + jsonHead + cl + "\r\n" + completion[:20], false},
		{"chunked body cut short", "HTTP/1.1 200 OK\r\n" + jsonHead + "Transfer-Encoding: chunked\r\n\r\n" + chunked(completion)[:30], false},
		{"100 Continue, then nothing", "HTTP/1.1 100 Continue\r\n\r\n", false},
		{"101 Switching Protocols", "HTTP/1.1 101 Switching Protocols\r\nUpgrade: h2c\r\nConnection: Upgrade\r\n\r\n", true},
		{"NUL in a header", "HTTP/1.1 200 OK\r\n" + jsonHead + "X-A: a\x00b\r\n" + cl + "\r\n" + completion, false},
		// The framing holds but the answer is not one: a Content-Length 40
		// bytes short of the JSON, a body that is not JSON, an error object
		// sent with a 200.
		{"Content-Length 40 bytes short", "HTTP/1.1 200 OK\r\n" + jsonHead + "Content-Length: " + strconv.Itoa(len(completion)-40) + "\r\n\r\n" + completion, false},
		{"not JSON", "HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: 31\r\n\r\n<html>bad node: 502 oops</html>", true},
		{"an error object with a 200", "HTTP/1.1 200 OK\r\n" + jsonHead + "Content-Length: 63\r\n\r\n" + `{"object":"error","message":"bad node: engine dead","code":500}`, true},
	}
	good := testenv.GPUSim(t, func(c *sim.Config) { c.TTFT, c.ITL = 0, 0 })
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			for _, stream := range []bool{false, true} {
				extra := `"max_tokens":2`
				if stream {
					extra += `,"stream":true`
				}
				body := chatBody("to a bad node", extra)

				// With a good node beside it: retried there, answered whole.
				bad := startFakeNode(t, tc.answer, tc.hold)
				cfg := twoNodeConfig(bad.URL(), good)
				gw := startGateway(t, cfg)
				probedHealthy(t, gw)
				resp, b := post(t, gw.URL+"/v1/chat/completions", body)
				if resp.StatusCode != 200 || resp.Header.Get("X-Upstream") != "gpu-a" || resp.Header.Get("X-Upstream-Attempts") != "2" {
					t.Fatalf("stream %v: %d from %q after %s attempts: %s", stream, resp.StatusCode,
						resp.Header.Get("X-Upstream"), resp.Header.Get("X-Upstream-Attempts"), b)
				}
				if stream && !strings.HasSuffix(string(b), "data: [DONE]\n\n") || !stream && !strings.Contains(string(b), `"chat.completion"`) {
					t.Fatalf("stream %v: answer %s", stream, b)
				}
				if strings.Contains(string(b), "bad node") || bad.requests.Load() != 1 {
					t.Fatalf("stream %v: the bad node had %d requests; answer %s", stream, bad.requests.Load(), b)
				}

				// Alone: a 502 in the OpenAI format that never quotes the
				// answer, and never cached: the same request is a miss again
				// (a 502, or a 503 once the failure has made the node unusable).
				bad = startFakeNode(t, tc.answer, tc.hold)
				cfg = testConfig()
				cfg.Cache.Backend = "memory"
				cfg.Nodes = []balancer.NodeConfig{{Name: "gpu-a", URL: bad.URL(), Kind: "vllm", Models: []string{"qwen3-8b"}, MaxConcurrency: 10, Weight: 1}}
				gw = startGateway(t, cfg)
				probedHealthy(t, gw)
				for i := range 2 {
					resp, b = post(t, gw.URL+"/v1/chat/completions", body)
					var env struct {
						Error struct {
							Type string `json:"type"`
						} `json:"error"`
					}
					if resp.StatusCode != 502 && (i == 0 || resp.StatusCode != 503) || resp.Header.Get("X-Cache") != "miss" || json.Unmarshal(b, &env) != nil || env.Error.Type == "" || strings.Contains(string(b), "bad node") {
						t.Fatalf("stream %v, alone, request %d: %d (X-Cache %q) %s", stream, i, resp.StatusCode, resp.Header.Get("X-Cache"), b)
					}
				}
				if strings.Contains(gw.Logs.String(), "bad node") {
					t.Fatalf("stream %v: the logs quote the answer:\n%s", stream, gw.Logs.String())
				}
			}
		})
	}
}

// twoNodeConfig has good as gpu-a and the node at badURL as gpu-b, in
// round robin, whose first pick starts at the second node: the first
// request tries gpu-b, then gpu-a.
func twoNodeConfig(badURL string, good *sim.Server) Config {
	cfg := testConfig(good, good)
	cfg.Nodes[1].URL = badURL
	cfg.Balancer.Policy = "round_robin"
	return cfg
}

// An interim answer (103 Early Hints) before the final one is read past,
// as RFC 9110 §15.2 asks: the final answer is the node's answer.
func TestUpstreamInterimAnswer(t *testing.T) {
	completion := `{"id":"x","object":"chat.completion","created":1,"model":"qwen3-8b","choices":[{"index":0,"message":{"role":"assistant","content":"after hints"},"finish_reason":"stop"}],"usage":{"prompt_tokens":1,"completion_tokens":2,"total_tokens":3}}`
	node := startFakeNode(t, "HTTP/1.1 103 Early Hints\r\nLink: </x>\r\n\r\nHTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: "+
		strconv.Itoa(len(completion))+"\r\n\r\n"+completion, true)
	cfg := testConfig()
	cfg.Nodes = []balancer.NodeConfig{{Name: "gpu-a", URL: node.URL(), Kind: "vllm", Models: []string{"qwen3-8b"}, MaxConcurrency: 10, Weight: 1}}
	gw := startGateway(t, cfg)
	for i := range 2 { // the second goes over the kept-alive connection
		resp, b := post(t, gw.URL+"/v1/chat/completions", chatBody("hints", ""))
		if resp.StatusCode != 200 || resp.Header.Get("X-Upstream-Attempts") != "1" || !strings.Contains(string(b), "after hints") {
			t.Fatalf("request %d: %d after %s attempts: %s", i, resp.StatusCode, resp.Header.Get("X-Upstream-Attempts"), b)
		}
	}
}
