package adapters

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"time"

	"golang.org/x/sys/unix"
)

// LoopTarget is an upstream as a loop talks to it: plain HTTP/1.1 with
// keep-alive connections pooled per loop. HTTPBackend.LoopTarget builds it.
type LoopTarget struct {
	addr    string    // host:port to dial
	heads   [2][]byte // request line and fixed headers, by Endpoint
	connect time.Duration
	total   time.Duration
}

// LoopTarget returns the backend as loops speak to it, or nil when it
// needs what only the goroutine client has (TLS).
func (b *HTTPBackend) LoopTarget() *LoopTarget {
	if b.client.IsTLS {
		return nil
	}
	u, err := BaseURL(b.target.URL)
	if err != nil {
		return nil
	}
	fixed := "Host: " + u.Host + "\r\nContent-Type: application/json\r\n"
	if b.auth != "" {
		fixed += "Authorization: " + b.auth + "\r\n"
	}
	for k, v := range b.target.Headers {
		if !printableASCII(k) || !printableASCII(v) {
			return nil
		}
		fixed += k + ": " + v + "\r\n"
	}
	t := &LoopTarget{addr: b.client.Addr, connect: b.cfg.Connect, total: b.cfg.Total}
	for _, ep := range []Endpoint{EndpointChat, EndpointCompletion} {
		t.heads[ep] = []byte("POST " + u.Path + ep.Path() + " HTTP/1.1\r\n" + fixed)
	}
	return t
}

// Send asks t for a non-streaming answer to ur on a pooled connection and
// calls done on the loop with it (valid until done returns) or with an
// error, which is one of Send's errors (ErrConnect, ErrFirstByteTimeout,
// ErrUpstreamClosed) when nothing came back. Loop only.
func (ex *LoopExchange) Send(t *LoopTarget, ur *UpstreamRequest, done func(*UpstreamResponse, error)) {
	l := ex.c.l
	var u *upConn
	var msg []byte
	if pool := l.idle[t]; len(pool) > 0 {
		u = pool[len(pool)-1]
		l.idle[t] = pool[:len(pool)-1]
		msg = u.buf[:0]
	}
	msg = append(msg, t.heads[ur.Endpoint]...)
	msg = append(msg, "Content-Length: "...)
	msg = strconv.AppendInt(msg, int64(len(ur.Body)), 10)
	if ur.RequestID != "" && printableASCII(ur.RequestID) {
		msg = append(msg, "\r\nX-Request-Id: "...)
		msg = append(msg, ur.RequestID...)
	}
	msg = append(msg, "\r\n\r\n"...)
	msg = append(msg, ur.Body...)
	if u != nil {
		u.send(msg, done)
		return
	}
	go func() {
		fd, err := dialFD(t)
		l.post(func() {
			if err != nil {
				done(nil, err)
				return
			}
			u := &upConn{l: l, fd: fd, t: t, in: make([]byte, 0, 4096)}
			if err := unix.EpollCtl(l.ep, unix.EPOLL_CTL_ADD, fd, &unix.EpollEvent{
				Events: unix.EPOLLIN | unix.EPOLLOUT | unix.EPOLLRDHUP | unix.EPOLLET, Fd: int32(fd)}); err != nil {
				unix.Close(fd)
				done(nil, fmt.Errorf("%w: epoll: %w", ErrConnect, err))
				return
			}
			l.setFD(fd, u)
			u.send(msg, done)
		})
	}()
}

// dialFD connects with the runtime's dialer (DNS, timeout) and returns a
// duplicate of the socket for a loop.
func dialFD(t *LoopTarget) (int, error) {
	d := net.Dialer{Timeout: t.connect, KeepAlive: 30 * time.Second}
	c, err := d.Dial("tcp", t.addr)
	if err != nil {
		return -1, fmt.Errorf("%w: %w", ErrConnect, err)
	}
	defer c.Close()
	rc, err := c.(*net.TCPConn).SyscallConn()
	if err != nil {
		return -1, fmt.Errorf("%w: %w", ErrConnect, err)
	}
	fd := -1
	var dupErr error
	if err := rc.Control(func(s uintptr) { fd, dupErr = unix.Dup(int(s)) }); err != nil || dupErr != nil {
		return -1, fmt.Errorf("%w: dup: %w", ErrConnect, errors.Join(err, dupErr))
	}
	unix.CloseOnExec(fd)
	return fd, nil
}

// upConn is an upstream connection of a loop: idle in its pool, or
// carrying one exchange.
type upConn struct {
	l         *loop
	fd        int
	t         *LoopTarget
	in        []byte
	out       []byte
	outOff    int
	buf       []byte                         // the last request's buffer, reused
	done      func(*UpstreamResponse, error) // nil while idle
	deadline  time.Time                      // of the answer in flight
	idleSince time.Time
	ahead     int8 // what a read made ahead found (aheadNone when none)
	queued    bool // out waits in the loop's write batch
	closed    bool
}

const (
	upIdleFor   = 30 * time.Second
	maxUpstream = 64 << 20 // largest answer body, as the goroutine client
)

func (u *upConn) send(msg []byte, done func(*UpstreamResponse, error)) {
	u.done, u.out, u.outOff = done, msg, 0
	u.deadline = u.l.now.Add(u.t.total)
	u.l.write(u, &u.queued)
}

func (u *upConn) pendingOut() (int, []byte) {
	u.queued = false
	if u.closed {
		return -1, nil
	}
	return u.fd, u.out[u.outOff:]
}

func (u *upConn) wrote(res int32) {
	if u.closed {
		return
	}
	if goOn, err := takeSent(res, &u.outOff); err != nil {
		u.fail(fmt.Errorf("%w: write: %w", ErrUpstreamClosed, err))
		return
	} else if !goOn {
		return
	}
	u.flush()
}

func (u *upConn) aheadBuf(events uint32) []byte {
	if u.closed || u.done == nil || events&(unix.EPOLLIN|hangUp) == 0 {
		return nil
	}
	return u.room()
}

// room returns the free space after the bytes read, grown when short.
func (u *upConn) room() []byte {
	if cap(u.in)-len(u.in) < 2048 {
		u.in = regrow(u.in, 2*cap(u.in)+4096)
	}
	return u.in[len(u.in):cap(u.in)]
}

func (u *upConn) landed(res int32, hup bool) {
	u.in, u.ahead, _ = landAhead(u.in, res, hup)
}

func (u *upConn) flush() {
	if err := writeOut(u.fd, u.out, &u.outOff); err == unix.EAGAIN {
		return
	} else if err != nil {
		u.fail(fmt.Errorf("%w: write: %w", ErrUpstreamClosed, err))
		return
	}
	if cap(u.out) <= 64<<10 {
		u.buf = u.out[:0]
	}
	u.out, u.outOff = nil, 0
}

func (u *upConn) ready(events uint32) {
	if events&unix.EPOLLOUT != 0 && u.outOff < len(u.out) {
		u.flush()
	}
	if u.closed || events&(unix.EPOLLIN|unix.EPOLLRDHUP|unix.EPOLLHUP|unix.EPOLLERR) == 0 {
		return
	}
	if u.done == nil { // idle: the upstream closed it, or broke the protocol
		u.close()
		return
	}
	ahead := u.ahead
	u.ahead = aheadNone
	eof := ahead == aheadEOF
	for ahead != aheadDrained && !eof {
		free := u.room()
		n, err := sysRead(u.fd, free)
		if n > 0 {
			u.in = u.in[:len(u.in)+n]
			if n < len(free) && events&hangUp == 0 {
				break // drained (see loopConn.read)
			}
			continue
		}
		if err == unix.EINTR {
			continue
		}
		if err == unix.EAGAIN {
			break
		}
		eof = true
	}
	resp, used, keep, err := parseAnswer(u.in, eof)
	switch {
	case err != nil:
		u.fail(err)
	case resp != nil:
		if used != len(u.in) || u.outOff < len(u.out) {
			keep = false // bytes nobody asked for, or an answer before the whole request went
		}
		done := u.done
		u.done, u.in = nil, u.in[:0]
		if keep {
			u.idleSince = u.l.now
			u.l.idle[u.t] = append(u.l.idle[u.t], u)
		} else {
			u.close()
		}
		done(resp, nil)
	case eof:
		u.fail(fmt.Errorf("%w: %w", ErrUpstreamClosed, io.ErrUnexpectedEOF))
	}
}

// fail closes the connection and fails the exchange in flight, if any.
func (u *upConn) fail(err error) {
	done := u.done
	u.done = nil
	u.close()
	if done != nil {
		done(nil, err)
	}
}

// expire enforces the answer's deadline and the idle limit.
func (u *upConn) expire() {
	now := u.l.now
	switch {
	case u.done != nil && now.After(u.deadline):
		u.fail(fmt.Errorf("%w: no answer within %s", ErrFirstByteTimeout, u.t.total))
	case u.done == nil && now.Sub(u.idleSince) > upIdleFor:
		u.close()
	}
}

func (u *upConn) close() {
	if u.closed {
		return
	}
	u.closed = true
	u.l.fds[u.fd] = nil
	unix.Close(u.fd)
	pool := u.l.idle[u.t]
	for i, p := range pool {
		if p == u {
			u.l.idle[u.t] = append(pool[:i], pool[i+1:]...)
			break
		}
	}
}

// parseAnswer reads an HTTP/1.1 answer from b: nil when more is needed.
// used is its length; keep is false when the connection must close after.
// eof means nothing more will come.
func parseAnswer(b []byte, eof bool) (resp *UpstreamResponse, used int, keep bool, err error) {
	for {
		end := bytes.Index(b, crlfcrlf)
		if end < 0 {
			if len(b) > maxHead*4 {
				return nil, 0, false, fmt.Errorf("%w: response head too large", ErrUpstreamClosed)
			}
			return nil, 0, false, nil
		}
		head := b[:end+2]
		line, rest, _ := bytes.Cut(head, crlf)
		if len(line) < 12 || !bytes.HasPrefix(line, []byte("HTTP/1.")) || line[8] != ' ' {
			return nil, 0, false, fmt.Errorf("%w: malformed status line", ErrUpstreamClosed)
		}
		status, okStatus := atoi(line[9:12])
		if !okStatus || status < 100 {
			return nil, 0, false, fmt.Errorf("%w: malformed status line", ErrUpstreamClosed)
		}
		if status < 200 { // 100 Continue and friends: skip
			b = b[end+4:]
			used += end + 4
			continue
		}
		r := &UpstreamResponse{Status: status}
		keep = line[7] == '1'
		cl, chunked := -1, false
		for len(rest) > 0 {
			var hl []byte
			hl, rest, _ = bytes.Cut(rest, crlf)
			name, value, ok := bytes.Cut(hl, []byte(":"))
			if !ok {
				continue
			}
			value = bytes.TrimSpace(value)
			switch {
			case bytes.EqualFold(name, []byte("Content-Length")):
				n, okLen := atoi(value)
				if !okLen {
					return nil, 0, false, fmt.Errorf("%w: bad Content-Length", ErrUpstreamClosed)
				}
				cl = n
			case bytes.EqualFold(name, []byte("Transfer-Encoding")):
				chunked = bytes.EqualFold(value, []byte("chunked"))
			case bytes.EqualFold(name, []byte("Content-Type")):
				if bytes.Equal(value, contentTypeJSON) {
					r.ContentType = contentTypeJSON // shared, never written
				} else {
					r.ContentType = append([]byte(nil), value...)
				}
			case bytes.EqualFold(name, []byte("Retry-After")):
				r.RetryAfter = append([]byte(nil), value...)
			case bytes.EqualFold(name, []byte("Connection")):
				if bytes.EqualFold(value, []byte("close")) {
					keep = false
				}
			}
		}
		body := b[end+4:]
		used += end + 4
		switch {
		case status == 204 || status == 304:
			return r, used, keep, nil
		case chunked:
			data, n, done, err := dechunk(body)
			if err != nil || !done {
				if err == nil && eof {
					err = fmt.Errorf("%w: %w", ErrUpstreamClosed, io.ErrUnexpectedEOF)
				}
				return nil, 0, false, err
			}
			r.Body = data
			return r, used + n, keep, nil
		case cl >= 0:
			if cl > maxUpstream {
				return nil, 0, false, fmt.Errorf("%w: answer body over %d bytes", ErrUpstreamClosed, maxUpstream)
			}
			if len(body) < cl {
				return nil, 0, false, nil
			}
			r.Body = append([]byte(nil), body[:cl]...)
			return r, used + cl, keep, nil
		default: // delimited by the end of the connection
			if !eof {
				return nil, 0, false, nil
			}
			r.Body = append([]byte(nil), body...)
			return r, used + len(body), false, nil
		}
	}
}

var (
	crlf            = []byte("\r\n")
	contentTypeJSON = []byte("application/json")
)

// atoi parses a non-negative decimal of at most 18 digits.
func atoi(b []byte) (int, bool) {
	if len(b) == 0 || len(b) > 18 {
		return 0, false
	}
	n := 0
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int(c-'0')
	}
	return n, true
}

// dechunk decodes a chunked body: done is false while it is incomplete.
func dechunk(b []byte) (data []byte, used int, done bool, err error) {
	for {
		rel := bytes.Index(b[used:], crlf)
		if rel < 0 {
			return nil, 0, false, nil
		}
		line := b[used : used+rel]
		if i := bytes.IndexByte(line, ';'); i >= 0 {
			line = line[:i]
		}
		size, convErr := strconv.ParseInt(string(bytes.TrimSpace(line)), 16, 64)
		if convErr != nil || size < 0 || size > maxUpstream {
			return nil, 0, false, fmt.Errorf("%w: bad chunk size", ErrUpstreamClosed)
		}
		start := used + rel + 2
		if size == 0 {
			// Trailers, if any, end with an empty line.
			end := bytes.Index(b[start-2:], crlfcrlf)
			if end < 0 {
				return nil, 0, false, nil
			}
			if data == nil {
				data = []byte{}
			}
			return data, start - 2 + end + 4, true, nil
		}
		if len(b) < start+int(size)+2 {
			return nil, 0, false, nil
		}
		data = append(data, b[start:start+int(size)]...)
		used = start + int(size) + 2
		if len(data) > maxUpstream {
			return nil, 0, false, fmt.Errorf("%w: answer body over %d bytes", ErrUpstreamClosed, maxUpstream)
		}
	}
}
