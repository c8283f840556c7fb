package adapters

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
)

// loopFixture is a LoopServer whose handler echoes the body (or runs
// handle), with a fasthttp fallback that says it served.
type loopFixture struct {
	srv  *LoopServer
	addr string
	done chan error
}

// plainIO makes startLoop's servers use plain system calls; ioModes sets
// it for each of its runs (the loop tests are not parallel).
var plainIO bool

// ioModes runs test with the loops batching through io_uring, where the
// kernel allows it, and with plain system calls.
func ioModes(t *testing.T, test func(t *testing.T)) {
	for _, plain := range []bool{false, true} {
		name := "io_uring"
		if plain {
			name = "plain"
		}
		t.Run(name, func(t *testing.T) {
			if !plain {
				if b, err := newIOBatch(); err != nil {
					t.Skipf("no io_uring here (%v): the loops make plain system calls", err)
				} else {
					b.close()
				}
			}
			plainIO = plain
			defer func() { plainIO = false }()
			test(t)
		})
	}
}

func startLoop(t *testing.T, cfg LoopConfig, handle func(*LoopExchange)) *loopFixture {
	t.Helper()
	cfg.PlainSyscalls = cfg.PlainSyscalls || plainIO
	if handle == nil {
		handle = func(ex *LoopExchange) {
			ex.Ctx.Response.Header.Set("X-Served-By", "loop")
			ex.Ctx.SetBody(ex.Ctx.PostBody())
			ex.Reply()
		}
	}
	if cfg.ClientTimeout == 0 {
		cfg.ClientTimeout = 10 * time.Second
	}
	if cfg.MaxBodyBytes == 0 {
		cfg.MaxBodyBytes = 1 << 20
	}
	if cfg.Paths == nil {
		cfg.Paths = []string{"/v1/chat/completions"}
	}
	fallback := &fasthttp.Server{Handler: func(ctx *fasthttp.RequestCtx) {
		ctx.Response.Header.Set("X-Served-By", "fallback")
		ctx.SetBody(ctx.PostBody())
	}}
	srv, err := NewLoopServer(cfg, handle, func(c net.Conn) { _ = fallback.ServeConn(c) })
	if err != nil {
		t.Fatal(err)
	}
	if srv.IOBatching() == cfg.PlainSyscalls {
		t.Fatalf("IOBatching() = %v with PlainSyscalls %v", srv.IOBatching(), cfg.PlainSyscalls)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &loopFixture{srv: srv, addr: ln.Addr().String(), done: make(chan error, 1)}
	go func() { f.done <- srv.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	})
	return f
}

func postReq(path, body string, extra ...string) string {
	h := "POST " + path + " HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n"
	for _, e := range extra {
		h += e + "\r\n"
	}
	return h + "\r\n" + body
}

// readResp reads one answer from br.
func readResp(t *testing.T, br *bufio.Reader) (*http.Response, string) {
	t.Helper()
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("read answer: %v", err)
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("read body: %v", err)
	}
	return resp, string(b)
}

func dialLoop(t *testing.T, addr string) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	return c, bufio.NewReader(c)
}

// More answers than one batch holds, all written in the same turn of the
// loop: each reaches its own client, whole.
func TestLoopManyAnswersInOneTurn(t *testing.T) { ioModes(t, testLoopManyAnswersInOneTurn) }

func testLoopManyAnswersInOneTurn(t *testing.T) {
	const n = batchEntries + batchEntries/2
	var held []*LoopExchange
	f := startLoop(t, LoopConfig{}, func(ex *LoopExchange) {
		ex.Ctx.SetBody(ex.Ctx.PostBody())
		if held = append(held, ex); len(held) == n { // the last one: answer all, now
			for _, h := range held {
				h.Reply()
			}
		}
	})
	conns := make([]*bufio.Reader, n)
	for i := range n {
		c, br := dialLoop(t, f.addr)
		if _, err := io.WriteString(c, postReq("/v1/chat/completions", fmt.Sprintf(`{"i":%d}`, i))); err != nil {
			t.Fatal(err)
		}
		conns[i] = br
	}
	for i, br := range conns {
		if resp, body := readResp(t, br); resp.StatusCode != 200 || body != fmt.Sprintf(`{"i":%d}`, i) {
			t.Fatalf("client %d got %d %q", i, resp.StatusCode, body)
		}
	}
}

// Served paths run in the loop; the first request of any other kind hands
// the connection, with everything read, to the fallback for good.
func TestLoopServesAndHandsOff(t *testing.T) { ioModes(t, testLoopServesAndHandsOff) }

func testLoopServesAndHandsOff(t *testing.T) {
	f := startLoop(t, LoopConfig{}, nil)
	c, br := dialLoop(t, f.addr)
	steps := []struct {
		req, by, body string
	}{
		{postReq("/v1/chat/completions", `{"a":1}`), "loop", `{"a":1}`},
		{postReq("/v1/chat/completions", `{"b":2}`), "loop", `{"b":2}`},
		{"GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n", "fallback", ""},
		{postReq("/v1/chat/completions", `{"c":3}`), "fallback", `{"c":3}`},
	}
	for i, s := range steps {
		if _, err := c.Write([]byte(s.req)); err != nil {
			t.Fatal(err)
		}
		resp, body := readResp(t, br)
		if got := resp.Header.Get("X-Served-By"); got != s.by || body != s.body || resp.StatusCode != 200 {
			t.Fatalf("step %d: served by %q, %d %q; want %q, 200 %q", i, got, resp.StatusCode, body, s.by, s.body)
		}
	}
}

// What the loop does not serve itself goes to the fallback: streams,
// chunked and oversize bodies, other paths, HTTP/1.0, 100-continue.
func TestLoopHandsOffWhatItDoesNotServe(t *testing.T) { ioModes(t, testLoopHandsOffWhatItDoesNotServe) }

func testLoopHandsOffWhatItDoesNotServe(t *testing.T) {
	f := startLoop(t, LoopConfig{MaxBodyBytes: 64}, nil)
	big := `{"x":"` + strings.Repeat("a", 100) + `"}`
	cases := map[string]string{
		"stream":      postReq("/v1/chat/completions", `{"stream":true}`),
		"oversize":    postReq("/v1/chat/completions", big),
		"other path":  postReq("/v1/embeddings", `{}`),
		"http/1.0":    strings.Replace(postReq("/v1/chat/completions", `{}`), "HTTP/1.1", "HTTP/1.0", 1),
		"chunked":     "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n",
		"expect":      postReq("/v1/chat/completions", `{}`, "Expect: 100-continue"),
		"header case": strings.Replace(postReq("/v1/chat/completions", `{}`), "POST", "post", 1),
	}
	for name, req := range cases {
		t.Run(name, func(t *testing.T) {
			c, br := dialLoop(t, f.addr)
			if _, err := c.Write([]byte(req)); err != nil {
				t.Fatal(err)
			}
			resp, _ := readResp(t, br)
			if resp.StatusCode == 100 {
				resp, _ = readResp(t, br)
			}
			if got := resp.Header.Get("X-Served-By"); got != "fallback" && resp.StatusCode < 400 {
				t.Fatalf("served by %q (%d), want the fallback", got, resp.StatusCode)
			}
		})
	}
}

// Pipelined requests, and requests that arrive a few bytes at a time or
// larger than the first buffer, are answered whole and in order.
func TestLoopPipelinedPartialAndLarge(t *testing.T) { ioModes(t, testLoopPipelinedPartialAndLarge) }

func testLoopPipelinedPartialAndLarge(t *testing.T) {
	f := startLoop(t, LoopConfig{}, nil)
	c, br := dialLoop(t, f.addr)
	var all string
	for i := range 5 {
		all += postReq("/v1/chat/completions", fmt.Sprintf(`{"n":%d}`, i))
	}
	if _, err := c.Write([]byte(all)); err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		if _, body := readResp(t, br); body != fmt.Sprintf(`{"n":%d}`, i) {
			t.Fatalf("pipelined answer %d = %q", i, body)
		}
	}
	req := postReq("/v1/chat/completions", `{"slow":true}`)
	for i := 0; i < len(req); i += 7 {
		if _, err := c.Write([]byte(req[i:min(i+7, len(req))])); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Millisecond)
	}
	if _, body := readResp(t, br); body != `{"slow":true}` {
		t.Fatalf("trickled answer = %q", body)
	}
	large := `{"x":"` + strings.Repeat("y", 300<<10) + `"}`
	go func() { _, _ = c.Write([]byte(postReq("/v1/chat/completions", large))) }()
	if _, body := readResp(t, br); body != large {
		t.Fatalf("large answer: %d bytes, want %d", len(body), len(large))
	}
}

// Connection: close is honoured, and an idle connection is closed after
// the client timeout.
func TestLoopConnectionCloseAndIdleTimeout(t *testing.T) {
	ioModes(t, testLoopConnectionCloseAndIdleTimeout)
}

func testLoopConnectionCloseAndIdleTimeout(t *testing.T) {
	f := startLoop(t, LoopConfig{ClientTimeout: 300 * time.Millisecond}, nil)
	c, br := dialLoop(t, f.addr)
	if _, err := c.Write([]byte(postReq("/v1/chat/completions", `{}`, "Connection: close"))); err != nil {
		t.Fatal(err)
	}
	resp, _ := readResp(t, br)
	if !resp.Close {
		t.Fatal("answer to Connection: close did not say close")
	}
	if _, err := br.ReadByte(); err != io.EOF {
		t.Fatalf("after close: %v, want EOF", err)
	}
	_, br2 := dialLoop(t, f.addr)
	start := time.Now()
	if _, err := br2.ReadByte(); err != io.EOF {
		t.Fatalf("idle connection: %v, want EOF", err)
	}
	if d := time.Since(start); d < 250*time.Millisecond || d > 3*time.Second {
		t.Fatalf("idle connection closed after %s, want about 300ms", d)
	}
}

// Shutdown closes idle connections, refuses new ones, and lets a request
// in flight (here on a goroutine) finish.
func TestLoopShutdownDrains(t *testing.T) { ioModes(t, testLoopShutdownDrains) }

func testLoopShutdownDrains(t *testing.T) {
	release := make(chan struct{})
	f := startLoop(t, LoopConfig{}, func(ex *LoopExchange) {
		ex.Go(func() {
			<-release
			ex.Ctx.SetBodyString("finished")
		})
	})
	busy, busyBR := dialLoop(t, f.addr)
	_, idleBR := dialLoop(t, f.addr)
	if _, err := busy.Write([]byte(postReq("/v1/chat/completions", `{}`))); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond) // the request is in hand
	shut := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		shut <- f.srv.Shutdown(ctx)
	}()
	if _, err := idleBR.ReadByte(); err != io.EOF {
		t.Fatalf("idle connection at shutdown: %v, want EOF", err)
	}
	deadline := time.Now().Add(2 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", f.addr, 200*time.Millisecond)
		if err != nil {
			break
		}
		c.Close()
		if time.Now().After(deadline) {
			t.Fatal("new connections still accepted during shutdown")
		}
		time.Sleep(20 * time.Millisecond)
	}
	close(release)
	resp, body := readResp(t, busyBR)
	if body != "finished" || !resp.Close {
		t.Fatalf("in-flight answer = %q (close %v)", body, resp.Close)
	}
	if err := <-shut; err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	if err := <-f.done; err != nil {
		t.Fatalf("Serve: %v", err)
	}
}

// upstream is a raw TCP server that answers each request with the next of
// its canned answers (a func of the request count), counting connections.
type upstream struct {
	ln    net.Listener
	conns atomic.Int32
	reqs  atomic.Int32
}

func startUpstream(t *testing.T, answer func(n int, c net.Conn) bool) *upstream {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u := &upstream{ln: ln}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			u.conns.Add(1)
			go func() {
				defer c.Close()
				br := bufio.NewReader(c)
				for {
					req, err := http.ReadRequest(br)
					if err != nil {
						return
					}
					_, _ = io.Copy(io.Discard, req.Body)
					if !answer(int(u.reqs.Add(1)), c) {
						return
					}
				}
			}()
		}
	}()
	return u
}

// sendVia starts a loop server whose handler forwards to target and writes
// what came back: status and body, or the error's text with status 599.
func sendVia(t *testing.T, target *LoopTarget) *loopFixture {
	return startLoop(t, LoopConfig{}, func(ex *LoopExchange) {
		ur := &UpstreamRequest{Endpoint: EndpointChat, Body: ex.Ctx.PostBody(), RequestID: "req-1"}
		ex.Send(target, ur, func(resp *UpstreamResponse, err error) {
			if err != nil {
				ex.Ctx.SetStatusCode(599)
				ex.Ctx.SetBodyString(classOf(err))
			} else {
				ex.Ctx.SetStatusCode(resp.Status)
				ex.Ctx.Response.Header.SetContentTypeBytes(resp.ContentType)
				ex.Ctx.Response.Header.SetBytesV("Retry-After", resp.RetryAfter)
				ex.Ctx.SetBody(resp.Body)
			}
			ex.Reply()
		})
	})
}

func classOf(err error) string {
	for _, e := range []error{ErrConnect, ErrFirstByteTimeout, ErrUpstreamClosed} {
		if errors.Is(err, e) {
			return e.Error()
		}
	}
	return "other: " + err.Error()
}

func loopTarget(t *testing.T, url string, total time.Duration) *LoopTarget {
	t.Helper()
	cfg := DefaultConfig()
	if total > 0 {
		cfg.Total = total
	}
	b, err := NewHTTPBackend(Target{Name: "up", URL: url, APIKey: "sk-up"}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	lt := b.LoopTarget()
	if lt == nil {
		t.Fatal("no loop target for a plain http upstream")
	}
	return lt
}

// Send speaks HTTP/1.1 to an upstream: sized and chunked answers, 1xx
// interim answers, keep-alive reuse of one connection.
func TestLoopSendAnswers(t *testing.T) { ioModes(t, testLoopSendAnswers) }

func testLoopSendAnswers(t *testing.T) {
	answers := []string{
		"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 7\r\n\r\n{\"a\":1}",
		"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n3\r\n{\"b\r\n4\r\n\":2}\r\n0\r\n\r\n",
		"HTTP/1.1 429 Too Many Requests\r\nRetry-After: 7\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}",
	}
	up := startUpstream(t, func(n int, c net.Conn) bool {
		_, _ = c.Write([]byte(answers[(n-1)%len(answers)]))
		return true
	})
	f := sendVia(t, loopTarget(t, "http://"+up.ln.Addr().String(), 0))
	c, br := dialLoop(t, f.addr)
	want := []struct {
		status     int
		body, more string
	}{{200, `{"a":1}`, ""}, {200, `{"b":2}`, ""}, {429, `{}`, "7"}}
	for i, w := range want {
		if _, err := c.Write([]byte(postReq("/v1/chat/completions", `{}`))); err != nil {
			t.Fatal(err)
		}
		resp, body := readResp(t, br)
		if resp.StatusCode != w.status || body != w.body || resp.Header.Get("Retry-After") != w.more {
			t.Fatalf("answer %d: %d %q retry-after %q", i, resp.StatusCode, body, resp.Header.Get("Retry-After"))
		}
	}
	if n := up.conns.Load(); n != 1 {
		t.Fatalf("upstream saw %d connections for 3 sequential requests, want 1 (keep-alive)", n)
	}
}

// Failures before the answer map to Send's errors, so the router retries.
func TestLoopSendFailures(t *testing.T) { ioModes(t, testLoopSendFailures) }

func testLoopSendFailures(t *testing.T) {
	t.Run("refused", func(t *testing.T) {
		ln, _ := net.Listen("tcp", "127.0.0.1:0")
		addr := ln.Addr().String()
		ln.Close()
		expectLoopError(t, loopTarget(t, "http://"+addr, 0), ErrConnect)
	})
	t.Run("closed mid-answer", func(t *testing.T) {
		up := startUpstream(t, func(_ int, c net.Conn) bool {
			_, _ = c.Write([]byte("HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{\"partial"))
			return false
		})
		expectLoopError(t, loopTarget(t, "http://"+up.ln.Addr().String(), 0), ErrUpstreamClosed)
	})
	t.Run("garbage", func(t *testing.T) {
		up := startUpstream(t, func(_ int, c net.Conn) bool {
			_, _ = c.Write([]byte("SSH-2.0-OpenSSH\r\n\r\n"))
			return false
		})
		expectLoopError(t, loopTarget(t, "http://"+up.ln.Addr().String(), 0), ErrUpstreamClosed)
	})
	t.Run("silent", func(t *testing.T) {
		up := startUpstream(t, func(int, net.Conn) bool { time.Sleep(5 * time.Second); return false })
		start := time.Now()
		expectLoopError(t, loopTarget(t, "http://"+up.ln.Addr().String(), 300*time.Millisecond), ErrFirstByteTimeout)
		if d := time.Since(start); d > 2*time.Second {
			t.Fatalf("timeout after %s, want about 300ms", d)
		}
	})
}

func expectLoopError(t *testing.T, target *LoopTarget, want error) {
	t.Helper()
	f := sendVia(t, target)
	c, br := dialLoop(t, f.addr)
	if _, err := c.Write([]byte(postReq("/v1/chat/completions", `{}`))); err != nil {
		t.Fatal(err)
	}
	resp, body := readResp(t, br)
	if resp.StatusCode != 599 || body != want.Error() {
		t.Fatalf("got %d %q, want error %q", resp.StatusCode, body, want)
	}
}

// An idle upstream connection the upstream closes is dropped at once, so
// the next request opens a new one instead of failing.
func TestLoopSendDropsClosedIdleConnections(t *testing.T) {
	ioModes(t, testLoopSendDropsClosedIdleConnections)
}

func testLoopSendDropsClosedIdleConnections(t *testing.T) {
	up := startUpstream(t, func(_ int, c net.Conn) bool {
		_, _ = c.Write([]byte("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"))
		go func() { time.Sleep(50 * time.Millisecond); c.Close() }()
		return true
	})
	f := sendVia(t, loopTarget(t, "http://"+up.ln.Addr().String(), 0))
	c, br := dialLoop(t, f.addr)
	for i := range 3 {
		if _, err := c.Write([]byte(postReq("/v1/chat/completions", `{}`))); err != nil {
			t.Fatal(err)
		}
		if resp, body := readResp(t, br); resp.StatusCode != 200 || body != "ok" {
			t.Fatalf("request %d: %d %q", i, resp.StatusCode, body)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if n := up.conns.Load(); n != 3 {
		t.Fatalf("upstream saw %d connections, want 3 (one per closed idle connection)", n)
	}
}

// The request the upstream gets carries the target's fixed headers, the
// key and the request id, and the body byte for byte.
func TestLoopSendRequestBytes(t *testing.T) { ioModes(t, testLoopSendRequestBytes) }

func testLoopSendRequestBytes(t *testing.T) {
	got := make(chan *http.Request, 1)
	bodies := make(chan []byte, 1)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		req, err := http.ReadRequest(bufio.NewReader(c))
		if err != nil {
			return
		}
		b, _ := io.ReadAll(req.Body)
		got <- req
		bodies <- b
		_, _ = c.Write([]byte("HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"))
	}()
	f := sendVia(t, loopTarget(t, "http://"+ln.Addr().String()+"/base", 0))
	c, br := dialLoop(t, f.addr)
	body := `{"model":"m","messages":[{"role":"user","content":"é"}]}`
	if _, err := c.Write([]byte(postReq("/v1/chat/completions", body))); err != nil {
		t.Fatal(err)
	}
	readResp(t, br)
	req := <-got
	if req.URL.Path != "/base/v1/chat/completions" || req.Header.Get("Authorization") != "Bearer sk-up" ||
		req.Header.Get("X-Request-Id") != "req-1" || req.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("upstream request: %s %v", req.URL.Path, req.Header)
	}
	if b := <-bodies; !bytes.Equal(b, []byte(body)) {
		t.Fatalf("upstream body = %q", b)
	}
}

// FuzzUpstreamAnswer feeds the loop's HTTP/1.1 answer parser arbitrary
// upstream bytes: it must never panic, never claim more bytes than it was
// given, and frame an answer from its own bytes alone (what follows it
// changes nothing).
func FuzzUpstreamAnswer(f *testing.F) {
	f.Add([]byte("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}"), false)
	f.Add([]byte("HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3;x=y\r\nabc\r\n0\r\nT: v\r\n\r\n"), false)
	f.Add([]byte("HTTP/1.0 503 Busy\r\nRetry-After: 3\r\n\r\nlater"), true)
	f.Add([]byte("HTTP/1.1 204 No Content\r\nConnection: close\r\n\r\n"), false)
	f.Fuzz(func(t *testing.T, b []byte, eof bool) {
		resp, used, keep, err := parseAnswer(b, eof)
		if resp == nil {
			return
		}
		if err != nil || used > len(b) || used <= 0 || resp.Status < 200 || resp.Status > 999 {
			t.Fatalf("answer %d, used %d of %d, err %v", resp.Status, used, len(b), err)
		}
		if !keep {
			return // close-delimited, or the connection closes: the end is the framing
		}
		again, used2, _, err2 := parseAnswer(b[:used], false)
		if again == nil || err2 != nil || used2 != used || !bytes.Equal(again.Body, resp.Body) || again.Status != resp.Status {
			t.Fatalf("the answer's own %d bytes frame differently: %v %d %v", used, again, used2, err2)
		}
	})
}
