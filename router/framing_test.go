package router

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	sim "frontdoor/internal/gpusim"
	"frontdoor/internal/testenv"
	"frontdoor/internal/units"
)

// The framing suite: raw bytes on a socket against the real gateway, one
// case per probe of the review of the event-loop engine. Each case states
// the answers the connection must get, in order, and whether the server
// then closes it. No case may reach a node (sim.Stats().Received) or an
// admin route (the test client is on loopback, an admin CIDR, so a
// smuggled GET /admin/nodes would be answered with the node list).

// framingReply is one answer read off the socket.
type framingReply struct {
	status int
	body   string
	header http.Header
}

// exchangeRaw writes each of parts in turn, gap apart, then reads answers
// until the server closes the connection or quiet passes without a byte.
func exchangeRaw(t *testing.T, addr string, parts []string, gap, quiet time.Duration) (replies []framingReply, closed bool) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	go func() {
		for i, p := range parts {
			if i > 0 && gap > 0 {
				time.Sleep(gap)
			}
			if _, err := io.WriteString(c, p); err != nil {
				return // the server closed: what it said is read below
			}
		}
	}()
	return readReplies(t, bufio.NewReader(&quietReader{c: c, quiet: quiet}), nil)
}

// readReplies appends to replies the answers read off br until the server
// closes the connection or br's quiet passes without a byte.
func readReplies(t *testing.T, br *bufio.Reader, replies []framingReply) (_ []framingReply, closed bool) {
	t.Helper()
	for {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			var ne net.Error
			switch {
			case errors.As(err, &ne) && ne.Timeout():
				return replies, false
			case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, net.ErrClosed), isReset(err):
				return replies, true
			}
			t.Fatalf("after %d answers: %v", len(replies), err)
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatalf("answer %d: %v", len(replies)+1, err)
		}
		replies = append(replies, framingReply{resp.StatusCode, string(b), resp.Header})
	}
}

// quietReader fails a read with a timeout when nothing arrives for quiet.
type quietReader struct {
	c     net.Conn
	quiet time.Duration
}

func (r *quietReader) Read(p []byte) (int, error) {
	_ = r.c.SetReadDeadline(time.Now().Add(r.quiet))
	return r.c.Read(p)
}

func isReset(err error) bool {
	return strings.Contains(err.Error(), "connection reset by peer")
}

// rawPost is a POST to the chat endpoint with the given header lines (each
// ending in CRLF) and body bytes.
func rawPost(headers, body string) string {
	return "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n" + headers + "\r\n" + body
}

// chunked frames body as one chunk and the last chunk.
func chunked(body string) string {
	return strconv.FormatInt(int64(len(body)), 16) + "\r\n" + body + "\r\n0\r\n\r\n"
}

const (
	adminProbe  = "GET /admin/nodes HTTP/1.1\r\nHost: x\r\n\r\n"
	healthProbe = "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
)

func TestFraming(t *testing.T) {
	s := testenv.GPUSim(t, func(c *sim.Config) { c.TTFT, c.ITL = 0, 0 })
	cfg := testConfig(s)
	cfg.Limits.MaxBodyBytes = 64 << 10
	gw := startGateway(t, cfg)
	addr := strings.TrimPrefix(gw.URL, "http://")
	valid := chatBody("smuggled?", `"max_tokens":2`)
	cl := func(body string) string { return "Content-Length: " + strconv.Itoa(len(body)) + "\r\n" }
	cases := []struct {
		name   string
		send   string
		want   []int // the statuses of the answers, in order
		closed bool
	}{
		// The review's smuggling probe. fasthttp reads a bare LF as the end
		// of a line, so the blank line ends the first request's headers:
		// an empty body (400), then a second POST whose 38-byte body is
		// the GET, not JSON (400). One parser frames it one way: nothing
		// is smuggled, the answers come in order and the connection stays.
		{"bare LF ends the headers",
			"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 0\r\n\n" +
				"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 38\r\n\r\n" + adminProbe,
			[]int{400, 400}, false},
		// fasthttp lets Transfer-Encoding win and closes after answering;
		// frontdoor refuses both (adapters.CheckRequestFraming), so the
		// valid chunked body never reaches the node.
		{"Content-Length then Transfer-Encoding",
			rawPost("Content-Length: 5\r\nTransfer-Encoding: chunked\r\n", chunked(valid)) + adminProbe, []int{400}, true},
		{"Transfer-Encoding then Content-Length",
			rawPost("Transfer-Encoding: chunked\r\nContent-Length: 5\r\n", chunked(valid)) + adminProbe, []int{400}, true},
		{"duplicate Content-Length", rawPost(cl(valid)+cl(valid), valid) + adminProbe, []int{400}, true},
		{"conflicting Content-Length", rawPost("Content-Length: 0\r\n"+cl(adminProbe), adminProbe), []int{400}, true},
		{"Content-Length list", rawPost("Content-Length: 0, "+strconv.Itoa(len(adminProbe))+"\r\n", adminProbe), []int{400}, true},
		{"Content-Length with a sign", rawPost("Content-Length: +"+strconv.Itoa(len(valid))+"\r\n", valid), []int{400}, true},
		{"Transfer-Encoding: chunked, identity", rawPost("Transfer-Encoding: chunked, identity\r\n", chunked(valid)) + adminProbe, []int{400}, true},
		{"Transfer-Encoding: gzip, chunked", rawPost("Transfer-Encoding: gzip, chunked\r\n", chunked(valid)) + adminProbe, []int{400}, true},
		// fasthttp reads identity as "no body" and would answer the GET
		// behind it as the next request; frontdoor refuses identity.
		{"Transfer-Encoding: identity", rawPost("Transfer-Encoding: identity\r\n", "") + adminProbe, []int{400}, true},
		{"two Transfer-Encoding headers", rawPost("Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n", chunked(valid)) + adminProbe, []int{400}, true},
		// fasthttp unfolds an obs-fold; frontdoor refuses one in framing.
		{"obs-fold in Transfer-Encoding", rawPost("Transfer-Encoding:\r\n chunked\r\n", chunked(valid)) + adminProbe, []int{400}, true},
		{"obs-fold after Transfer-Encoding", rawPost("Transfer-Encoding: x\r\n chunked\r\n", chunked(valid)) + adminProbe, []int{400}, true},
		{"obs-fold in Content-Length", rawPost("Content-Length:\r\n "+strconv.Itoa(len(valid))+"\r\n", valid) + adminProbe, []int{400}, true},
		{"space before the colon", rawPost("Transfer-Encoding : chunked\r\n", chunked(valid)) + adminProbe, []int{400}, true},
		{"chunk sizes ended by a bare LF", rawPost("Transfer-Encoding: chunked\r\n", "5\nhello\n0\n\n") + adminProbe, []int{400}, true},
		{"Content-Length in the trailer", rawPost("Transfer-Encoding: chunked\r\n", "5\r\nhello\r\n0\r\nContent-Length: 9\r\n\r\n") + adminProbe, []int{400}, true},
		{"Transfer-Encoding on HTTP/1.0",
			"POST /v1/chat/completions HTTP/1.0\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n" + chunked(valid), []int{400}, true},
		{"NUL in a header", rawPost("X-A: a\x00b\r\n"+cl(valid), valid) + adminProbe, []int{400}, true},
		{"bare CR in a header value", rawPost("X-A: a\rb\r\n"+cl(valid), valid) + adminProbe, []int{400}, true},
		{"bare CR in a header name", rawPost("X-A\r: b\r\n"+cl(valid), valid) + adminProbe, []int{400}, true},
		{"bare CR ends a line", rawPost("Content-Length: "+strconv.Itoa(len(valid))+"\rX-A: b\r\n", valid) + adminProbe, []int{400}, true},
		{"20 KB header", rawPost("X-Big: "+strings.Repeat("a", 20<<10)+"\r\n"+cl(valid), valid) + adminProbe, []int{431}, true},
		// Up to twice max_body_bytes the handler reads the body and answers
		// 413 on a connection that goes on; beyond, fasthttp stops reading
		// at the header and closes.
		{"body over max_body_bytes", rawPost("Content-Length: "+strconv.Itoa(100<<10)+"\r\n", strings.Repeat("a", 100<<10)) + healthProbe, []int{413, 200}, false},
		{"body over twice max_body_bytes", rawPost("Content-Length: "+strconv.Itoa(200<<10)+"\r\n", strings.Repeat("a", 200<<10)) + adminProbe, []int{413}, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := s.Stats().Received
			quiet := 300 * time.Millisecond
			replies, closed := exchangeRaw(t, addr, []string{tc.send}, 0, quiet)
			checkReplies(t, replies, tc.want)
			if closed != tc.closed {
				t.Fatalf("closed: %v, want %v (answers %v)", closed, tc.closed, replies)
			}
			if n := s.Stats().Received - before; n != 0 {
				t.Fatalf("%d requests reached the node", n)
			}
		})
	}
}

// checkReplies compares the statuses in order. Errors must be OpenAI
// errors, and no answer may be the admin node list.
func checkReplies(t *testing.T, replies []framingReply, want []int) {
	t.Helper()
	got := make([]int, len(replies))
	for i, r := range replies {
		got[i] = r.status
		if strings.Contains(r.body, `"gpu-a"`) {
			t.Fatalf("answer %d is the admin node list: %q", i+1, r.body)
		}
	}
	if len(got) != len(want) {
		t.Fatalf("answers %v, want %v: %+v", got, want, replies)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("answers %v, want %v: %+v", got, want, replies)
		}
		if want[i] >= 400 && !strings.Contains(replies[i].body, `"error":{`) {
			t.Fatalf("answer %d is not an OpenAI error: %q", i+1, replies[i].body)
		}
	}
}

// Three pipelined requests are answered in order on the one connection,
// whether they arrive in one write or in 7-byte pieces. The chat request
// among them is the one request that reaches the node.
func TestFramingPipelined(t *testing.T) {
	gw, sims := simAndGateway(t, 1, func(c *sim.Config) { c.TTFT, c.ITL = 0, 0 })
	addr := strings.TrimPrefix(gw.URL, "http://")
	valid := chatBody("pipelined", `"max_tokens":2`)
	three := rawPost("Content-Length: "+strconv.Itoa(len(valid))+"\r\n", valid) + healthProbe +
		rawPost("Content-Length: 5\r\n", "[1,2]")
	var pieces []string
	for i := 0; i < len(three); i += 7 {
		pieces = append(pieces, three[i:min(i+7, len(three))])
	}
	for _, tc := range []struct {
		name  string
		parts []string
	}{{"one write", []string{three}}, {"7-byte writes", pieces}} {
		t.Run(tc.name, func(t *testing.T) {
			before := sims[0].Stats().Received
			replies, closed := exchangeRaw(t, addr, tc.parts, time.Millisecond, 500*time.Millisecond)
			checkReplies(t, replies, []int{200, 200, 400})
			if closed || !strings.Contains(replies[0].body, `"chat.completion"`) || replies[1].body != `{"status":"ok"}` {
				t.Fatalf("closed %v, answers %+v", closed, replies)
			}
			if n := sims[0].Stats().Received - before; n != 1 {
				t.Fatalf("%d requests reached the node, want 1", n)
			}
		})
	}
}

// A request pipelined while the one before it is still being handled (the
// node takes 100 ms) is answered at once after it, not at a timeout.
func TestFramingPipelinedDuringHandling(t *testing.T) {
	gw, _ := simAndGateway(t, 1, func(c *sim.Config) { c.TTFT, c.ITL = 100*time.Millisecond, 0 })
	valid := chatBody("slow node", `"max_tokens":1`)
	start := time.Now()
	replies, closed := exchangeRaw(t, strings.TrimPrefix(gw.URL, "http://"),
		[]string{rawPost("Content-Length: "+strconv.Itoa(len(valid))+"\r\n", valid), healthProbe}, 30*time.Millisecond, 2*time.Second)
	checkReplies(t, replies, []int{200, 200})
	if took := time.Since(start) - 2*time.Second; closed || took > time.Second {
		t.Fatalf("closed %v; the answers took %s", closed, took)
	}
}

// A JSON escape in a key is the key: "\u0073tream":true asks for a
// stream like "stream":true does, and gets one.
func TestFramingEscapedStreamKey(t *testing.T) {
	gw, _ := simAndGateway(t, 1, func(c *sim.Config) { c.TTFT, c.ITL = 0, 0 })
	resp, b := post(t, gw.URL+"/v1/chat/completions", chatBody("escaped", `"max_tokens":2,"\u0073tream":true`))
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" || !strings.HasSuffix(string(b), "data: [DONE]\n\n") {
		t.Fatalf("%d %q: %s", resp.StatusCode, resp.Header.Get("Content-Type"), b)
	}
}

// Slowloris: a request sent a byte every 0.5 s is cut off at
// timeouts.client, counted from its first byte, and never reaches a node.
func TestFramingSlowloris(t *testing.T) {
	s := testenv.GPUSim(t, nil)
	cfg := testConfig(s)
	cfg.Timeouts.Client = units.Duration(1500 * time.Millisecond)
	gw := startGateway(t, cfg)
	valid := chatBody("slow", "")
	req := rawPost("Content-Length: "+strconv.Itoa(len(valid))+"\r\n", valid)
	parts := strings.Split(req, "")
	start := time.Now()
	replies, closed := exchangeRaw(t, strings.TrimPrefix(gw.URL, "http://"), parts, 500*time.Millisecond, 10*time.Second)
	took := time.Since(start)
	if !closed || took < 1400*time.Millisecond || took > 4*time.Second {
		t.Fatalf("closed %v after %s, want closed at about 1.5 s", closed, took)
	}
	checkReplies(t, replies, []int{408})
	if n := s.Stats().Received; n != 0 {
		t.Fatalf("%d requests reached the node", n)
	}
}

// A client that pipelines 512 MiB of requests (64 KiB bodies the gateway
// refuses without a node) and never reads an answer: the server reads on
// only as its answers drain, and what it holds stays bounded. The test
// process hosts the gateway, so its RSS is measured, from
// /proc/self/status, against a baseline taken just before.
func TestFramingClientNeverReads(t *testing.T) {
	if testing.Short() {
		t.Skip("512 MiB over loopback")
	}
	s := testenv.GPUSim(t, nil)
	cfg := testConfig(s)
	cfg.Limits.MaxBodyBytes = 128 << 10
	cfg.Logging.AccessLog = false
	gw := startGateway(t, cfg)
	addr := strings.TrimPrefix(gw.URL, "http://")
	body := "x" + strings.Repeat("a", 64<<10-1) // not JSON: a 400 at its first byte
	req := []byte(rawPost("Content-Length: "+strconv.Itoa(len(body))+"\r\n", body))
	const total = 512 << 20
	runtime.GC()
	debug.FreeOSMemory()
	base := rssBytes(t)
	var peak atomic.Int64
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			if r := rssBytes(t); r > peak.Load() {
				peak.Store(r)
			}
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetWriteDeadline(time.Now().Add(60 * time.Second))
	sent := 0
	var werr error
	for sent < total {
		var n int
		n, werr = c.Write(req)
		sent += n
		if werr != nil {
			break
		}
	}
	close(stop)
	<-sampled
	growth := peak.Load() - base
	t.Logf("sent %d MiB (%v); RSS %d MiB before, peak %d MiB (+%d MiB)", sent>>20, werr, base>>20, peak.Load()>>20, growth>>20)
	if growth > 200<<20 {
		t.Fatalf("RSS grew by %d MiB while a client pipelined without reading", growth>>20)
	}
	// The server is still there for others, and nothing reached the node.
	replies, _ := exchangeRaw(t, addr, []string{healthProbe}, 0, 2*time.Second)
	checkReplies(t, replies, []int{200})
	if n := s.Stats().Received; n != 0 {
		t.Fatalf("%d requests reached the node", n)
	}
}

// rssBytes is the resident set size of this process.
func rssBytes(t *testing.T) int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Skip("no /proc/self/status")
	}
	for _, line := range bytes.Split(b, []byte("\n")) {
		if v, ok := bytes.CutPrefix(line, []byte("VmRSS:")); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(string(v)), " kB"), 10, 64)
			if err != nil {
				t.Fatalf("VmRSS %q: %v", v, err)
			}
			return kb << 10
		}
	}
	t.Fatal("no VmRSS in /proc/self/status")
	return 0
}

// Fields after a chunked body (trailers) are never headers: a request that
// sends any, or announces them with a Trailer header, is refused with a
// 400 and a close before a header is read. Otherwise a trailer would pass
// for a header that a proxy in front checked or stripped (the review sent
// X-Cache-Only: 1 as a trailer and got a lookup-only answer).
func TestFramingTrailers(t *testing.T) {
	s := testenv.GPUSim(t, func(c *sim.Config) { c.TTFT, c.ITL = 0, 0 })
	cfg := testConfig(s)
	const token = "ee108b1a29457acb8502a2def6fad060ce371df1754414650ef379947113cb71"
	t.Setenv("TEST_ADMIN_TOKEN", token)
	cfg.Admin.TokenEnv, cfg.Admin.AllowCIDRs = "TEST_ADMIN_TOKEN", nil
	gw := startGateway(t, cfg)
	addr := strings.TrimPrefix(gw.URL, "http://")
	valid := chatBody("trailers", `"max_tokens":2`)
	const te = "Transfer-Encoding: chunked\r\n"
	// withTrailer frames body as one chunk, then the last chunk and fields.
	withTrailer := func(body, fields string) string {
		return strconv.FormatInt(int64(len(body)), 16) + "\r\n" + body + "\r\n0\r\n" + fields + "\r\n"
	}
	adminGet := func(headers, body string) string {
		return "GET /admin/nodes HTTP/1.1\r\nHost: x\r\n" + headers + "\r\n" + body
	}
	cases := []struct {
		name    string
		send    string
		want    int
		closed  bool
		reached int64 // requests that reach the node
		list    bool  // the answer is the admin node list
	}{
		// Controls: the header is honoured (lookup-only, so a 204 and no
		// node), a chunked body without trailers is served, and the token
		// as a header opens the admin surface.
		{"X-Cache-Only as a header", rawPost(te+"X-Cache-Only: 1\r\n", chunked(valid)), 204, false, 0, false},
		{"chunked without trailers", rawPost(te, chunked(valid)), 200, false, 1, false},
		{"admin token as a header", adminGet("Authorization: Bearer "+token+"\r\n", ""), 200, false, 0, true},
		{"X-Cache-Only as a trailer", rawPost(te, withTrailer(valid, "X-Cache-Only: 1\r\nX-Request-Id: from-trailer\r\n")) + healthProbe, 400, true, 0, false},
		{"Cache-Control as a trailer", rawPost(te, withTrailer(valid, "Cache-Control: no-store\r\n")), 400, true, 0, false},
		{"Trailer header", rawPost(te+"Trailer: X-Cache-Only\r\n", withTrailer(valid, "X-Cache-Only: 1\r\n")), 400, true, 0, false},
		{"Trailer header, no trailer sent", rawPost(te+"trailer: X-Cache-Only\r\n", chunked(valid)), 400, true, 0, false},
		// fasthttp refuses an Authorization trailer itself; this holds it.
		{"admin token as a trailer", adminGet(te, "0\r\nAuthorization: Bearer "+token+"\r\n\r\n"), 400, true, 0, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := s.Stats().Received
			replies, closed := exchangeRaw(t, addr, []string{tc.send}, 0, 300*time.Millisecond)
			if tc.list {
				if len(replies) != 1 || replies[0].status != 200 || !strings.Contains(replies[0].body, `"gpu-a"`) {
					t.Fatalf("not the admin node list: %+v", replies)
				}
			} else {
				checkReplies(t, replies, []int{tc.want})
			}
			if closed != tc.closed {
				t.Fatalf("closed: %v, want %v (answers %v)", closed, tc.closed, replies)
			}
			if n := s.Stats().Received - before; n != tc.reached {
				t.Fatalf("%d requests reached the node, want %d", n, tc.reached)
			}
			if id := replies[0].header.Get("X-Request-Id"); id == "" || id == "from-trailer" {
				t.Fatalf("X-Request-Id %q", id)
			}
		})
	}
	// Loud: counted by reason (the Trailer headers as framing) and logged.
	checkRefusals(t, gw.URL, map[string]float64{"trailers": 2, "framing": 2})
	if logs := gw.Logs.String(); !strings.Contains(logs, `"msg":"http: request refused","reason":"trailers"`) {
		t.Fatalf("no WARN line for the refused trailers:\n%s", logs)
	}
}

// A request with Expect: 100-continue that its headers condemn gets its
// final answer, an OpenAI error and a close, before it sends its body and
// without a 100 Continue: a Content-Length over limits.max_body_bytes
// (413), a framing the gateway refuses (400), a missing or bad API key
// (401). One that passes gets 100 Continue, sends its body and is served.
func TestFramingExpect(t *testing.T) {
	s := testenv.GPUSim(t, func(c *sim.Config) { c.TTFT, c.ITL = 0, 0 })
	cfg := testConfig(s)
	cfg.Limits.MaxBodyBytes = 64 << 10
	cfg.Auth.Required = true
	t.Setenv("TEST_EXPECT_KEYS", "sk-expect-key")
	cfg.Tenants = []Tenant{{Name: "acme", APIKeysEnv: "TEST_EXPECT_KEYS"}}
	cfg.Passthrough.Paths = []string{"/v1/audio/*"}
	gw := startGateway(t, cfg)
	addr := strings.TrimPrefix(gw.URL, "http://")
	valid := chatBody("expect", `"max_tokens":2`)
	const (
		expect = "Expect: 100-continue\r\n"
		key    = "Authorization: Bearer sk-expect-key\r\n"
		te     = "Transfer-Encoding: chunked\r\n"
	)
	cl := func(n int) string { return "Content-Length: " + strconv.Itoa(n) + "\r\n" }
	cases := []expectCase{
		{"100 GB", rawPost(expect+key+"Content-Length: 107374182400\r\n", ""), 413, "request_too_large", "", nil},
		{"one byte over max_body_bytes", rawPost(expect+key+cl(64<<10+1), ""), 413, "request_too_large", "", nil},
		{"over twice max_body_bytes elsewhere", "POST /admin/cache/warm HTTP/1.1\r\nHost: x\r\n" + expect + cl(128<<10+1) + "\r\n", 413, "request_too_large", "", nil},
		{"no API key", rawPost(expect+cl(len(valid)), ""), 401, "missing_api_key", "", nil},
		{"bad API key", rawPost(expect+"Authorization: Bearer sk-nope\r\n"+cl(len(valid)), ""), 401, "invalid_api_key", "", nil},
		{"embeddings without a key", "POST /v1/embeddings HTTP/1.1\r\nHost: x\r\n" + expect + cl(40) + "\r\n", 401, "missing_api_key", "", nil},
		{"pass-through over max_body_bytes", "POST /v1/audio/transcriptions HTTP/1.1\r\nHost: x\r\n" + expect + key + cl(64<<10+1) + "\r\n", 413, "request_too_large", "", nil},
		{"both lengths", rawPost(expect+key+cl(len(valid))+te, ""), 400, "", "", nil},
		{"Transfer-Encoding: identity", rawPost(expect+key+"Transfer-Encoding: identity\r\n", ""), 400, "", "", nil},
		{"Trailer header", rawPost(expect+key+te+"Trailer: X-Cache-Only\r\n", ""), 400, "", "", nil},
		{"valid", rawPost(expect+key+cl(len(valid)), ""), 100, "", valid, []int{200}},
		{"at max_body_bytes", rawPost(expect+key+cl(64<<10), ""), 100, "", strings.Repeat("a", 64<<10), []int{400}},
		// A chunked body's length is not known before it is read: it gets
		// 100 Continue and is cut at twice the limit, with a 413.
		{"chunked over twice max_body_bytes", rawPost(expect+key+te, ""), 100, "", chunked(strings.Repeat("a", 200<<10)), []int{413}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := s.Stats().Received
			exchangeExpect(t, addr, tc)
			reached := int64(0)
			if tc.name == "valid" {
				reached = 1
			}
			if n := s.Stats().Received - before; n != reached {
				t.Fatalf("%d requests reached the node, want %d", n, reached)
			}
		})
	}
	checkRefusals(t, gw.URL, map[string]float64{"expect_too_large": 4, "expect_auth": 3})
}

// expectCase is a request sent with Expect: 100-continue.
type expectCase struct {
	name string
	head string // the request line and headers, through the blank line
	want int    // the first answer, read before any body byte is sent
	code string // its OpenAI error code, if any
	body string // sent after a 100 Continue
	then []int  // the answers to it
}

// exchangeExpect sends tc's head alone and holds the answer to it: a
// refusal is an OpenAI error with Connection: close, then the close; a
// 100 Continue is followed by the body and tc.then.
func exchangeExpect(t *testing.T, addr string, tc expectCase) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, tc.head); err != nil {
		t.Fatal(err)
	}
	qr := &quietReader{c: c, quiet: 2 * time.Second}
	br := bufio.NewReader(qr)
	first, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("no answer before the body: %v", err)
	}
	b, _ := io.ReadAll(first.Body)
	first.Body.Close()
	if first.StatusCode != tc.want {
		t.Fatalf("answered %d before the body, want %d: %s", first.StatusCode, tc.want, b)
	}
	if tc.want == 100 {
		qr.quiet = 500 * time.Millisecond
		go func() { _, _ = io.WriteString(c, tc.body) }()
		replies, _ := readReplies(t, br, nil)
		checkReplies(t, replies, tc.then)
		return
	}
	if !strings.Contains(string(b), `"error":{`) || tc.code != "" && !strings.Contains(string(b), `"code":`+strconv.Quote(tc.code)) {
		t.Fatalf("not the OpenAI error %q: %s", tc.code, b)
	}
	if !first.Close || first.Header.Get("X-Request-Id") == "" {
		t.Fatalf("Connection: close %v, X-Request-Id %q", first.Close, first.Header.Get("X-Request-Id"))
	}
	if rest, closed := readReplies(t, br, nil); len(rest) > 0 || !closed {
		t.Fatalf("after the refusal: answers %v, closed %v", rest, closed)
	}
}

// checkRefusals compares frontdoor_transport_refusals_total by reason.
func checkRefusals(t *testing.T, url string, want map[string]float64) {
	t.Helper()
	resp, err := httpClient.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	mb, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for reason, n := range want {
		series := `frontdoor_transport_refusals_total{reason="` + reason + `"}`
		if got := metricValue(t, string(mb), series); got != n {
			t.Fatalf("%s = %v, want %v", series, got, n)
		}
	}
}

// The admin listener holds the same rules: trailers are refused before
// anything reads a header, and an Expect: 100-continue request is sized
// before its body; one acting for a tenant with no key, which the listener
// allows, gets its 100 Continue and is served.
func TestFramingAdminListener(t *testing.T) {
	t.Setenv("FRONTDOOR_ADMIN_TOKEN", "")
	t.Setenv("TEST_EXPECT_KEYS", "sk-expect-key")
	s := testenv.GPUSim(t, func(c *sim.Config) { c.TTFT, c.ITL = 0, 0 })
	cfg := testConfig(s)
	cfg.Admin = DefaultConfig().Admin
	cfg.Limits.MaxBodyBytes = 64 << 10
	cfg.Auth.Required = true
	cfg.Tenants = []Tenant{{Name: "acme", APIKeysEnv: "TEST_EXPECT_KEYS"}}
	gw := startGateway(t, cfg)
	addr := strings.TrimPrefix(serveAdmin(t, gw), "http://")
	valid := chatBody("admin listener", `"max_tokens":2`)
	const head = "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nX-Frontdoor-Tenant: acme\r\n"
	te := "Transfer-Encoding: chunked\r\n"
	trailer := strconv.FormatInt(int64(len(valid)), 16) + "\r\n" + valid + "\r\n0\r\nX-Cache-Only: 1\r\nOrigin: http://evil.example\r\n\r\n"
	// The listener's browser check (Origin) never sees the trailer either.
	replies, closed := exchangeRaw(t, addr, []string{head + te + "\r\n" + trailer}, 0, 300*time.Millisecond)
	checkReplies(t, replies, []int{400})
	if !closed || !strings.Contains(replies[0].body, "trailers") {
		t.Fatalf("trailer on the admin listener: closed %v, %+v", closed, replies)
	}
	for _, tc := range []expectCase{
		{"over max_body_bytes", head + "Expect: 100-continue\r\nContent-Length: 107374182400\r\n\r\n", 413, "request_too_large", "", nil},
		{"acting for a tenant", head + "Expect: 100-continue\r\nContent-Length: " + strconv.Itoa(len(valid)) + "\r\n\r\n", 100, "", valid, []int{200}},
	} {
		t.Run(tc.name, func(t *testing.T) { exchangeExpect(t, addr, tc) })
	}
	if n := s.Stats().Received; n != 1 {
		t.Fatalf("%d requests reached the node, want 1", n)
	}
}

// The clients people use still work: a 2 MiB chat body sent with Expect:
// 100-continue by Go's net/http client and by curl (which sends it for
// bodies over 1 MiB) gets 100 Continue, then 200.
func TestFramingExpectClients(t *testing.T) {
	gw, sims := simAndGateway(t, 1, func(c *sim.Config) { c.TTFT, c.ITL = 0, 0 })
	body := chatBody(strings.Repeat("lorem ipsum ", 2<<20/12), `"max_tokens":2`)
	t.Run("net/http", func(t *testing.T) {
		client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{ExpectContinueTimeout: 10 * time.Second}}
		var got100 atomic.Bool
		ctx := httptrace.WithClientTrace(context.Background(), &httptrace.ClientTrace{Got100Continue: func() { got100.Store(true) }})
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, gw.URL+"/v1/chat/completions", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Expect", "100-continue")
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !got100.Load() || !strings.Contains(string(b), `"chat.completion"`) {
			t.Fatalf("%d (100 Continue: %v): %s", resp.StatusCode, got100.Load(), b)
		}
	})
	t.Run("curl", func(t *testing.T) {
		curl, err := exec.LookPath("curl")
		if err != nil {
			t.Skip("no curl")
		}
		f := filepath.Join(t.TempDir(), "body.json")
		if err := os.WriteFile(f, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(curl, "-sS", "-v", "-H", "Content-Type: application/json", "--data-binary", "@"+f,
			"-w", "\n%{http_code}", gw.URL+"/v1/chat/completions")
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("curl: %v\n%s", err, stderr.String())
		}
		if !strings.HasSuffix(string(out), "\n200") || !strings.Contains(stderr.String(), "HTTP/1.1 100 Continue") {
			t.Fatalf("curl: %s\n%s", out, stderr.String())
		}
	})
	if n := sims[0].Stats().Received; n < 1 {
		t.Fatalf("%d requests reached the node", n)
	}
}
