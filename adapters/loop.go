package adapters

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"runtime"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"github.com/valyala/fasthttp"
	"golang.org/x/sys/unix"
)

// LoopServer serves the hot path, whole POST requests to a few paths, from
// epoll event loops: one thread per loop reads requests, runs the handler
// and talks to upstreams without a goroutine per connection, and hands the
// reads and writes of each turn to the kernel in a batch (ioBatch). On a
// virtualised 2-core machine that halves the gateway's CPU per request
// against fasthttp (docs/BENCHMARKS.md). Every other connection (streams, GETs, chunked
// bodies, HTTP/1.0, anything odd) is handed, with the bytes already read,
// to a fallback server at its first such request and stays there.
//
// The handler runs on the loop's thread and must not block: it answers
// with LoopExchange.Reply, asks an upstream with LoopExchange.Send, or
// moves blocking work to a goroutine with LoopExchange.Go.
type LoopServer struct {
	cfg     LoopConfig
	handle  func(*LoopExchange)
	handOff func(net.Conn)
	lines   [][]byte // "POST <path> HTTP/1.1\r\n" for each served path
	mu      sync.Mutex
	ln      net.Listener
	loops   []*loop
	stopped bool
	done    chan struct{}
	batch   bool // loops batch reads and writes through io_uring
}

// LoopConfig configures a LoopServer.
type LoopConfig struct {
	Loops         int           // event loops (threads); 0: DefaultLoops
	ClientTimeout time.Duration // a request must arrive whole, and an idle connection is closed, within it
	MaxBodyBytes  int           // larger bodies go to the fallback server
	Paths         []string      // POST paths served in the loops
	ServerName    string        // the Server header
	// PlainSyscalls turns off batching reads and writes through io_uring,
	// even where the kernel allows it: one system call per operation.
	PlainSyscalls bool
}

// DefaultLoops is one loop per four CPUs, at least one. A loop only moves
// bytes and runs the cheap part of a request (work that may take long goes
// to goroutines, which use every CPU); a loop's thread that finds nothing
// to do sleeps and must be woken, and on a small machine one busy loop
// batches more per wake-up than two half-idle ones (docs/BENCHMARKS.md).
func DefaultLoops() int { return max(1, runtime.GOMAXPROCS(0)/4) }

// Validate checks the settings.
func (c LoopConfig) Validate() error {
	var errs []error
	if c.Loops < 0 {
		errs = append(errs, errors.New("loops: must be >= 0"))
	}
	if c.ClientTimeout <= 0 {
		errs = append(errs, errors.New("client_timeout: must be > 0"))
	}
	if c.MaxBodyBytes <= 0 {
		errs = append(errs, errors.New("max_body_bytes: must be > 0"))
	}
	if len(c.Paths) == 0 {
		errs = append(errs, errors.New("paths: at least one"))
	}
	return errors.Join(errs...)
}

// NewLoopServer builds a server that calls handle for hot-path requests
// and handOff (on a goroutine of its own) for every other connection.
func NewLoopServer(cfg LoopConfig, handle func(*LoopExchange), handOff func(net.Conn)) (*LoopServer, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Loops == 0 {
		cfg.Loops = DefaultLoops()
	}
	s := &LoopServer{cfg: cfg, handle: handle, handOff: handOff, done: make(chan struct{})}
	for _, p := range cfg.Paths {
		s.lines = append(s.lines, []byte("POST "+p+" HTTP/1.1\r\n"))
	}
	if !cfg.PlainSyscalls {
		if b, err := newIOBatch(); err == nil {
			b.close()
			s.batch = true
		}
	}
	return s, nil
}

// Loops is the number of event loops.
func (s *LoopServer) Loops() int { return s.cfg.Loops }

// IOBatching reports whether the loops batch their reads and writes
// through io_uring: PlainSyscalls is off and the kernel allows it.
func (s *LoopServer) IOBatching() bool { return s.batch }

// Serve runs the loops on ln (a TCP listener) until Shutdown.
func (s *LoopServer) Serve(ln net.Listener) error {
	tl, ok := ln.(*net.TCPListener)
	if !ok {
		return fmt.Errorf("loop server: need a TCP listener, got %T", ln)
	}
	rc, err := tl.SyscallConn()
	if err != nil {
		return fmt.Errorf("loop server: %w", err)
	}
	lfd := -1
	if err := rc.Control(func(fd uintptr) { lfd = int(fd) }); err != nil {
		return fmt.Errorf("loop server: %w", err)
	}
	s.mu.Lock()
	if s.stopped || s.ln != nil {
		s.mu.Unlock()
		return errors.New("loop server: already served or shut down")
	}
	s.ln = ln
	var wg sync.WaitGroup
	for range s.cfg.Loops {
		var l *loop
		if l, err = newLoop(s, lfd); err != nil {
			break
		}
		s.loops = append(s.loops, l)
		wg.Add(1)
		go func() { defer wg.Done(); l.run() }()
	}
	s.mu.Unlock()
	if err != nil {
		_ = s.Shutdown(context.Background())
	}
	wg.Wait()
	close(s.done)
	return err
}

// Shutdown stops accepting, closes idle connections, lets exchanges in
// flight finish and waits for the loops to end. When ctx ends first it
// cuts what is left (the loops still end once running handlers return).
func (s *LoopServer) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	first := !s.stopped
	s.stopped = true
	loops, ln := s.loops, s.ln
	s.mu.Unlock()
	if ln == nil {
		return nil // never served
	}
	if first {
		// Every loop lets go of the listening socket before it closes, so
		// its number, once reused, can never reach a loop's accept.
		var stopped sync.WaitGroup
		for _, l := range loops {
			stopped.Add(1)
			l.post(func() { l.stop(); stopped.Done() })
		}
		stopped.Wait()
		_ = ln.Close()
	}
	select {
	case <-s.done:
		return nil
	case <-ctx.Done():
		for _, l := range s.loops {
			l.post(l.cut)
		}
		return ctx.Err()
	}
}

// loop is one event loop: an epoll set, its connections and upstream
// pools. Everything in it runs on the loop's goroutine, except post.
type loop struct {
	s            *LoopServer
	ep, efd      int
	lfd          int      // the shared listening socket; -1 once stopped
	acceptPaused bool     // out of descriptors: not listening until the next sweep
	fds          []loopFD // by file descriptor
	idle         map[*LoopTarget][]*upConn
	clients      int
	busy         int       // exchanges in flight
	now          time.Time // read once per wake-up
	sweepAt      time.Time
	spinUntil    time.Time // poll without sleeping until then

	hr bytes.Reader
	br *bufio.Reader

	ring        *ioBatch // nil: plain system calls
	reads       []aheadRead
	writes      []loopFD // sockets with bytes to write at the end of the turn
	spareWrites []loopFD
	sendIdx     []int

	mu     sync.Mutex
	posted []func()
}

// loopFD is a socket of a loop.
type loopFD interface {
	ready(events uint32)
	// aheadBuf returns where the first read for events goes when the loop
	// makes it ahead in a batch, or nil; landed takes its result.
	aheadBuf(events uint32) []byte
	landed(res int32, hup bool)
	// pendingOut returns the bytes a queued write still has to send (nil:
	// none, or closed); wrote takes the batch's result.
	pendingOut() (fd int, b []byte)
	wrote(res int32)
	flush()
}

// aheadRead is a read made ahead, in a batch, for a socket epoll reported.
type aheadRead struct {
	h   loopFD
	idx int
	hup bool
}

// The state a read made ahead leaves for the socket's own read.
const (
	aheadNone    = iota
	aheadDrained // nothing more to read for this event
	aheadMore    // the buffer filled, or the peer hung up: read on
	aheadEOF     // the peer's end, or an error
)

const (
	epollExclusive = 1 << 28 // EPOLLEXCLUSIVE: one loop wakes per new connection
	sweepEvery     = 50 * time.Millisecond
	maxHead        = 16 << 10
)

func newLoop(s *LoopServer, lfd int) (*loop, error) {
	ep, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("epoll_create: %w", err)
	}
	efd, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	if err != nil {
		unix.Close(ep)
		return nil, fmt.Errorf("eventfd: %w", err)
	}
	l := &loop{s: s, ep: ep, efd: efd, lfd: lfd, idle: map[*LoopTarget][]*upConn{},
		br: bufio.NewReaderSize(nil, maxHead+64)}
	if s.batch {
		l.ring, _ = newIOBatch() // nil (plain system calls) should it fail now
	}
	if err := unix.EpollCtl(ep, unix.EPOLL_CTL_ADD, efd, &unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(efd)}); err != nil {
		l.closeFDs()
		return nil, fmt.Errorf("epoll_ctl eventfd: %w", err)
	}
	if err := unix.EpollCtl(ep, unix.EPOLL_CTL_ADD, lfd, &unix.EpollEvent{Events: unix.EPOLLIN | epollExclusive, Fd: int32(lfd)}); err != nil {
		l.closeFDs()
		return nil, fmt.Errorf("epoll_ctl listener: %w", err)
	}
	return l, nil
}

func (l *loop) closeFDs() {
	unix.Close(l.ep)
	unix.Close(l.efd)
	if l.ring != nil {
		l.ring.close()
	}
}

func (l *loop) run() {
	defer l.closeFDs()
	events := make([]unix.EpollEvent, 256)
	for {
		n, err := l.wait(events)
		if err != nil && !errors.Is(err, unix.EINTR) {
			panic(fmt.Sprintf("epoll_wait: %v", err)) // a bad epoll fd: a bug
		}
		l.now = time.Now()
		if n > 0 {
			l.spinUntil = l.now.Add(spinFor)
			if l.ring != nil {
				l.readAhead(events[:n])
			}
		}
		for i := range n {
			fd := int(events[i].Fd)
			switch fd {
			case l.lfd:
				l.accept()
			case l.efd:
				l.runPosted()
			default:
				if fd < len(l.fds) && l.fds[fd] != nil {
					l.fds[fd].ready(events[i].Events)
				}
			}
		}
		if l.now.After(l.sweepAt) {
			l.sweep()
			l.sweepAt = l.now.Add(sweepEvery)
		}
		l.flushWrites()
		if l.lfd < 0 && l.clients == 0 && l.busy == 0 {
			for _, h := range l.fds {
				if u, ok := h.(*upConn); ok {
					u.close()
				}
			}
			return
		}
	}
}

// readAhead makes, in one batch, the first read of every socket epoll
// reported readable; each socket's ready then finds its bytes in place.
func (l *loop) readAhead(events []unix.EpollEvent) {
	l.reads = l.reads[:0]
	for i := range events {
		fd := int(events[i].Fd)
		if fd < 0 || fd >= len(l.fds) || l.fds[fd] == nil {
			continue
		}
		h := l.fds[fd]
		if p := h.aheadBuf(events[i].Events); p != nil {
			l.reads = append(l.reads, aheadRead{h: h, idx: l.ring.recv(fd, p), hup: events[i].Events&hangUp != 0})
		}
	}
	l.ring.run()
	for _, r := range l.reads {
		r.h.landed(l.ring.res[r.idx], r.hup)
	}
	clear(l.reads)
}

// write sends h's queued bytes: now without a ring, else in the batch at
// the end of the loop's turn.
func (l *loop) write(h loopFD, queued *bool) {
	if l.ring == nil {
		h.flush()
		return
	}
	if !*queued {
		*queued = true
		l.writes = append(l.writes, h)
	}
}

// flushWrites sends every queued write in batches. Finishing a write may
// start the next request and queue more; it runs until none is left.
func (l *loop) flushWrites() {
	for len(l.writes) > 0 {
		round := l.writes
		l.writes = l.spareWrites[:0] // what this round queues goes to the next
		for start := 0; start < len(round); start += batchEntries {
			chunk := round[start:min(len(round), start+batchEntries)]
			l.sendIdx = l.sendIdx[:0]
			for _, h := range chunk {
				idx := -1
				if fd, b := h.pendingOut(); len(b) > 0 {
					idx = l.ring.send(fd, b)
				}
				l.sendIdx = append(l.sendIdx, idx)
			}
			l.ring.run()
			for i, h := range chunk {
				if idx := l.sendIdx[i]; idx >= 0 {
					h.wrote(l.ring.res[idx])
				}
			}
		}
		clear(round)
		l.spareWrites = round[:0]
	}
}

// spinFor is how long a loop that has just worked polls for more before it
// sleeps: the next request or answer usually comes within it at low
// concurrency, and a sleeping thread costs a wake-up to resume. Between
// polls it yields the CPU to any thread waiting for it.
const spinFor = 50 * time.Microsecond

// wait returns the next events: it polls without sleeping for up to
// spinFor after the last work, then sleeps until an event or the sweep.
func (l *loop) wait(events []unix.EpollEvent) (int, error) {
	if l.spinUntil.IsZero() {
		return unix.EpollWait(l.ep, events, int(sweepEvery/time.Millisecond))
	}
	for {
		r, _, e := syscall.RawSyscall6(syscall.SYS_EPOLL_PWAIT, uintptr(l.ep), uintptr(unsafe.Pointer(&events[0])), uintptr(len(events)), 0, 0, 0)
		if e == 0 && r > 0 {
			return int(r), nil
		}
		if time.Now().After(l.spinUntil) {
			l.spinUntil = time.Time{}
			return unix.EpollWait(l.ep, events, int(sweepEvery/time.Millisecond))
		}
		// Let whatever waits for this CPU run first, the node or the
		// client on a small machine: the poll then costs them nothing.
		syscall.RawSyscall(syscall.SYS_SCHED_YIELD, 0, 0, 0)
	}
}

// post runs fn on the loop; safe from any goroutine.
func (l *loop) post(fn func()) {
	l.mu.Lock()
	wake := len(l.posted) == 0
	l.posted = append(l.posted, fn)
	l.mu.Unlock()
	if wake {
		var one = [8]byte{1}
		_, _ = unix.Write(l.efd, one[:])
	}
}

func (l *loop) runPosted() {
	var buf [8]byte
	_, _ = unix.Read(l.efd, buf[:])
	l.mu.Lock()
	fns := l.posted
	l.posted = nil
	l.mu.Unlock()
	l.now = time.Now()
	for _, fn := range fns {
		fn()
	}
}

// stop stops accepting and closes the connections that wait for a request.
func (l *loop) stop() {
	if l.lfd >= 0 {
		if !l.acceptPaused {
			_ = unix.EpollCtl(l.ep, unix.EPOLL_CTL_DEL, l.lfd, nil)
		}
		l.lfd = -1
	}
	for _, h := range l.fds {
		if c, ok := h.(*loopConn); ok && c != nil {
			c.advance()
		}
	}
}

// cut ends everything at once: the grace period is over.
func (l *loop) cut() {
	l.stop()
	for _, h := range l.fds {
		switch h := h.(type) {
		case *loopConn:
			h.close()
		case *upConn:
			h.fail(fmt.Errorf("%w: the server is shutting down", ErrUpstreamClosed))
		}
	}
}

func (l *loop) accept() {
	for l.lfd >= 0 {
		fd, sa, err := unix.Accept4(l.lfd, unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC)
		if err != nil {
			if err != unix.EAGAIN && err != unix.EINTR && err != unix.ECONNABORTED {
				// Out of descriptors or memory: stop listening until the
				// next sweep instead of spinning on a ready listener.
				_ = unix.EpollCtl(l.ep, unix.EPOLL_CTL_DEL, l.lfd, nil)
				l.acceptPaused = true
			}
			return // EAGAIN: drained, or another loop took it
		}
		_ = unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_NODELAY, 1)
		c := &loopConn{l: l, fd: fd, remote: sockaddrToTCP(sa), in: make([]byte, 0, 4096)}
		if err := unix.EpollCtl(l.ep, unix.EPOLL_CTL_ADD, fd, &unix.EpollEvent{
			Events: unix.EPOLLIN | unix.EPOLLOUT | unix.EPOLLRDHUP | unix.EPOLLET, Fd: int32(fd)}); err != nil {
			unix.Close(fd)
			continue
		}
		c.deadline = l.now.Add(l.s.cfg.ClientTimeout)
		l.setFD(fd, c)
		l.clients++
	}
}

func (l *loop) setFD(fd int, h loopFD) {
	for fd >= len(l.fds) {
		l.fds = append(l.fds, nil)
	}
	l.fds[fd] = h
}

// sweep enforces deadlines and closes upstream connections idle too long.
func (l *loop) sweep() {
	if l.acceptPaused && l.lfd >= 0 {
		l.acceptPaused = false
		_ = unix.EpollCtl(l.ep, unix.EPOLL_CTL_ADD, l.lfd, &unix.EpollEvent{Events: unix.EPOLLIN | epollExclusive, Fd: int32(l.lfd)})
	}
	for _, h := range l.fds {
		switch h := h.(type) {
		case *loopConn:
			if !h.deadline.IsZero() && l.now.After(h.deadline) {
				h.close()
			}
		case *upConn:
			h.expire()
		}
	}
}

func sockaddrToTCP(sa unix.Sockaddr) net.Addr {
	switch sa := sa.(type) {
	case *unix.SockaddrInet4:
		return &net.TCPAddr{IP: net.IP(sa.Addr[:]).To16(), Port: sa.Port}
	case *unix.SockaddrInet6:
		return &net.TCPAddr{IP: net.IP(sa.Addr[:]), Port: sa.Port}
	}
	return &net.TCPAddr{}
}

// loopConn is a client connection owned by a loop.
type loopConn struct {
	l         *loop
	fd        int
	remote    net.Addr
	in        []byte // bytes read; the next request starts at start
	start     int
	out       []byte // the answer being written, from outOff
	outOff    int
	ex        *LoopExchange // the request in hand
	ctx       *fasthttp.RequestCtx
	deadline  time.Time // zero while a request is in hand
	paused    bool      // stopped reading: a pipelined backlog is big enough
	ahead     int8      // what a read made ahead found (aheadNone when none)
	queued    bool      // out waits in the loop's write batch
	peerGone  bool      // read EOF or an error
	advancing bool      // inside advance: Reply must not re-enter it
	closeAfter,
	closed bool
}

const maxBacklog = 1 << 20 // pipelined bytes read while a request is in hand

func (c *loopConn) ready(events uint32) {
	if events&(unix.EPOLLIN|unix.EPOLLRDHUP|unix.EPOLLHUP|unix.EPOLLERR) != 0 {
		c.read(events&hangUp != 0)
	}
	if events&unix.EPOLLOUT != 0 && c.outOff < len(c.out) {
		c.flush()
	}
	c.advance()
}

// hangUp: the peer closed or reset; the end is read right after the data.
const hangUp = unix.EPOLLRDHUP | unix.EPOLLHUP | unix.EPOLLERR

// read reads until the socket is drained (edge-triggered epoll). A short
// read means drained, unless the peer hung up: then its end, which comes
// with no edge of its own, is read too.
func (c *loopConn) read(hup bool) {
	if a := c.ahead; a != aheadNone {
		c.ahead = aheadNone
		if a == aheadDrained {
			return
		}
	}
	for !c.peerGone && !c.closed {
		if c.ex != nil && len(c.in)-c.start > maxBacklog {
			c.paused = true
			return
		}
		free := c.room()
		n, err := sysRead(c.fd, free)
		switch {
		case n > 0:
			c.in = c.in[:len(c.in)+n]
			if n < len(free) && !hup {
				return // drained; the next arrival is a new edge
			}
		case err == unix.EINTR:
		case err == unix.EAGAIN:
			return
		default: // EOF or a reset
			c.peerGone = true
		}
	}
}

func (c *loopConn) aheadBuf(events uint32) []byte {
	if events&(unix.EPOLLIN|hangUp) == 0 || c.peerGone || c.closed ||
		(c.ex != nil && len(c.in)-c.start > maxBacklog) {
		return nil // read, if at all, decides for itself
	}
	return c.room()
}

// room returns the free space after the bytes read, grown when short.
func (c *loopConn) room() []byte {
	if cap(c.in)-len(c.in) < 2048 {
		c.grow(len(c.in) - c.start + 4096)
	}
	return c.in[len(c.in):cap(c.in)]
}

func (c *loopConn) landed(res int32, hup bool) {
	var gone bool
	c.in, c.ahead, gone = landAhead(c.in, res, hup)
	c.peerGone = c.peerGone || gone
}

// landAhead appends a read made ahead into the free space of in and says
// what it leaves for the socket's own read; gone: EOF or an error.
func landAhead(in []byte, res int32, hup bool) ([]byte, int8, bool) {
	n, err := readResult(res)
	switch {
	case n > 0:
		full := n == cap(in)-len(in)
		in = in[:len(in)+n]
		if full || hup {
			return in, aheadMore, false
		}
		return in, aheadDrained, false
	case err == unix.EAGAIN:
		return in, aheadDrained, false
	case err == unix.EINTR:
		return in, aheadMore, false
	}
	return in, aheadEOF, true
}

// grow moves the unread bytes to a new buffer of at least size bytes (the
// old one may still back the request in hand).
func (c *loopConn) grow(size int) {
	c.in, c.start = regrow(c.in[c.start:], max(2*cap(c.in), size)), 0
}

// regrow copies b into a new buffer with room for size bytes.
func regrow(b []byte, size int) []byte {
	nb := make([]byte, len(b), max(size, len(b)))
	copy(nb, b)
	return nb
}

// advance starts the next request when the connection is free for it.
func (c *loopConn) advance() {
	for !c.closed && c.ex == nil && c.outOff == len(c.out) {
		if c.paused {
			c.paused = false
			c.read(true) // the edges that came while paused are gone: read to EAGAIN
		}
		b := c.in[c.start:]
		if len(b) == 0 {
			c.in, c.start = c.in[:0], 0
			if c.peerGone || c.closeAfter || c.l.lfd < 0 {
				c.close()
			}
			return
		}
		c.advancing = true
		n := c.frame(b) // > 0: consumed and handled (maybe answered already)
		c.advancing = false
		switch {
		case n > 0:
		case n == 0: // need more bytes
			if c.peerGone || c.l.lfd < 0 {
				c.close()
			}
			return
		default:
			c.handOff()
			return
		}
	}
}

// frame starts the request at the head of b and returns its length, 0 when
// it is not all there yet, or -1 when it belongs to the fallback server.
func (c *loopConn) frame(b []byte) int {
	s := c.l.s
	served := false
	for _, line := range s.lines {
		if len(b) >= len(line) && bytes.Equal(b[:len(line)], line) {
			served = true
			break
		}
		if len(b) < len(line) && bytes.HasPrefix(line, b) {
			return 0
		}
	}
	if !served {
		return -1
	}
	end := bytes.Index(b, crlfcrlf)
	if end < 0 {
		if len(b) > maxHead {
			return -1
		}
		return 0
	}
	head := b[:end+4]
	if end+4 > maxHead {
		return -1
	}
	if c.ctx == nil {
		c.ctx = new(fasthttp.RequestCtx)
		c.ctx.Init2(c, nil, false)
	}
	ctx := c.ctx
	ctx.Request.Reset()
	ctx.Response.Reset()
	l := c.l
	l.hr.Reset(head)
	l.br.Reset(&l.hr)
	if err := ctx.Request.Header.Read(l.br); err != nil {
		return -1 // malformed: the fallback server answers it
	}
	h := &ctx.Request.Header
	cl := h.ContentLength()
	if cl < 0 || cl > s.cfg.MaxBodyBytes || len(h.Peek(fasthttp.HeaderExpect)) > 0 {
		return -1 // chunked, unsized, oversize, or waiting for 100-continue
	}
	total := len(head) + cl
	if len(b) < total {
		if total > cap(c.in)-c.start {
			c.grow(total + 4096)
		}
		return 0
	}
	body := b[len(head):total]
	if bytes.Contains(body, quotedStream) {
		return -1 // a stream (or stream:false): the fallback server pumps those
	}
	ctx.Request.SetBodyRaw(body)
	if h.ConnectionClose() {
		c.closeAfter = true
	}
	c.deadline = time.Time{}
	ex := &LoopExchange{Ctx: ctx, c: c} // fresh: a stale one replies no more
	c.ex = ex
	c.start += total
	l.busy++
	l.s.handle(ex)
	return total
}

var (
	crlfcrlf     = []byte("\r\n\r\n")
	quotedStream = []byte(`"stream"`)
)

// handOff gives the connection, with its unread bytes, to the fallback
// server.
func (c *loopConn) handOff() {
	l := c.l
	_ = unix.EpollCtl(l.ep, unix.EPOLL_CTL_DEL, c.fd, nil)
	l.fds[c.fd] = nil
	l.clients--
	c.closed = true
	f := os.NewFile(uintptr(c.fd), "")
	nc, err := net.FileConn(f) // a duplicate in the runtime's poller
	_ = f.Close()
	if err != nil {
		return
	}
	prefix := append([]byte(nil), c.in[c.start:]...)
	go l.s.handOff(newDeferredConnPrefixed(nc, prefix))
}

// writeOut writes b[*off:] until done or the socket is full (EAGAIN,
// returned: EPOLLOUT resumes), advancing *off.
func writeOut(fd int, b []byte, off *int) error {
	for *off < len(b) {
		n, err := sysWrite(fd, b[*off:])
		switch {
		case n > 0:
			*off += n
		case err == unix.EINTR:
		default:
			return err
		}
	}
	return nil
}

func (c *loopConn) flush() {
	if err := writeOut(c.fd, c.out, &c.outOff); err == unix.EAGAIN {
		return
	} else if err != nil {
		c.close()
		return
	}
	if cap(c.out) > 64<<10 {
		c.out = nil
	} else {
		c.out = c.out[:0]
	}
	c.outOff = 0
	if c.closeAfter {
		c.close()
	}
}

func (c *loopConn) pendingOut() (int, []byte) {
	c.queued = false
	if c.closed {
		return -1, nil
	}
	return c.fd, c.out[c.outOff:]
}

func (c *loopConn) wrote(res int32) {
	if goOn, err := takeSent(res, &c.outOff); err != nil {
		c.close()
		return
	} else if !goOn {
		return
	}
	c.flush() // the rest of a short write, then the end of the answer
	if !c.closed {
		c.advance()
	}
}

// takeSent applies a batched send's result to *off. goOn is false when
// the write must wait (EAGAIN: EPOLLOUT resumes it) or failed with err.
func takeSent(res int32, off *int) (goOn bool, err error) {
	n, err := sentResult(res)
	switch {
	case n > 0:
		*off += n
	case err == unix.EAGAIN:
		return false, nil
	case err != unix.EINTR:
		return false, err
	}
	return true, nil
}

func (c *loopConn) close() {
	if c.closed {
		return
	}
	c.closed = true
	c.l.fds[c.fd] = nil
	c.l.clients--
	unix.Close(c.fd)
}

// The fasthttp.RequestCtx of a loop request sees its connection as this
// net.Conn: addresses only. No I/O goes through it.
func (c *loopConn) Read([]byte) (int, error)         { return 0, errLoopConnIO }
func (c *loopConn) Write([]byte) (int, error)        { return 0, errLoopConnIO }
func (c *loopConn) Close() error                     { return nil }
func (c *loopConn) LocalAddr() net.Addr              { return &net.TCPAddr{} }
func (c *loopConn) RemoteAddr() net.Addr             { return c.remote }
func (c *loopConn) SetDeadline(time.Time) error      { return nil }
func (c *loopConn) SetReadDeadline(time.Time) error  { return nil }
func (c *loopConn) SetWriteDeadline(time.Time) error { return nil }

var errLoopConnIO = errors.New("loop connection: I/O goes through the loop")

// LoopExchange is one hot-path request in a loop. Ctx holds the request
// and collects the answer; it is valid until Reply.
type LoopExchange struct {
	Ctx     *fasthttp.RequestCtx
	c       *loopConn
	replied bool
}

// Reply writes Ctx's answer and ends the exchange. Loop only.
func (ex *LoopExchange) Reply() {
	if ex.replied {
		return
	}
	ex.replied = true
	c := ex.c
	l := c.l
	l.busy--
	c.ex = nil
	if c.closed {
		return
	}
	resp := &ex.Ctx.Response
	if c.closeAfter || c.peerGone || l.lfd < 0 {
		resp.SetConnectionClose()
		c.closeAfter = true
	}
	if resp.ConnectionClose() {
		c.closeAfter = true
	}
	body := resp.Body()
	resp.Header.SetContentLength(len(body))
	resp.Header.SetServer(l.s.cfg.ServerName)
	c.out = resp.Header.AppendBytes(c.out)
	c.out = append(c.out, body...)
	c.deadline = l.now.Add(l.s.cfg.ClientTimeout)
	l.write(c, &c.queued)
	if !c.closed && !c.advancing {
		c.advance()
	}
}

// Go runs fn on a goroutine of its own, for work that may block, then
// replies on the loop. fn must recover its own panics to release what it
// holds; one that escapes is answered with a 500. Loop only.
func (ex *LoopExchange) Go(fn func()) {
	l := ex.c.l
	go func() {
		defer func() {
			if r := recover(); r != nil {
				ex.Ctx.Response.Reset()
				ex.Ctx.Response.SetStatusCode(500)
				ex.Ctx.Response.SetBodyString(`{"error":{"message":"internal error","type":"server_error","param":null,"code":"internal_error"}}`)
			}
			if ex.Ctx.Response.IsBodyStream() {
				ex.Ctx.Response.Body() // a stream the handler did not expect: read it whole
			}
			l.post(ex.Reply)
		}()
		fn()
	}()
}

// sysRead and sysWrite are read(2) and write(2) without the scheduler's
// bookkeeping: loop sockets are non-blocking.
func sysRead(fd int, p []byte) (int, error) {
	n, _, e := syscall.RawSyscall(syscall.SYS_READ, uintptr(fd), uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)))
	if e != 0 {
		return 0, e
	}
	if n == 0 {
		return 0, errEOF
	}
	return int(n), nil
}

func sysWrite(fd int, p []byte) (int, error) {
	n, _, e := syscall.RawSyscall(syscall.SYS_WRITE, uintptr(fd), uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)))
	if e != 0 {
		return 0, e
	}
	return int(n), nil
}

var errEOF = errors.New("EOF")
