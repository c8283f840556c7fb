package adapters

import (
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"
)

// DeferredConn saves one system call per request/answer exchange on a TCP
// connection. Go reads a socket by trying read(2) first and waiting for
// readiness only when it would block; right after a request is written the
// peer cannot have answered yet, so that first read always comes back
// empty. A DeferredConn holds a write back (when armed) and performs it
// inside the next Read, after the poller's readiness has been reset, then
// waits without the wasted read. The readiness reset happens before the
// write, so an answer can never arrive unseen.
//
// Writes are held only while armed: always for an upstream client (it reads
// the answer right after writing the request); for a server connection only
// when the handler arms it for a complete, non-streamed answer (the server
// reads the next request right after). Held bytes are written at the next
// Read, an unarmed Write, or Close, whichever comes first; a Close from
// another goroutine never waits for a blocked Read. All I/O goes through
// the runtime poller with non-blocking system calls (raw ones under load,
// see rawWrite), and deadlines are re-armed lazily (see deadlineSlack).
type DeferredConn struct {
	*net.TCPConn
	raw syscall.RawConn

	mu      sync.Mutex
	pending []byte
	armed   bool
	always  bool
	spare   []byte // the buffer of the last flushed write, reused

	readDL, writeDL deadline
}

// deadline is the last deadline given to the poller in one direction.
type deadline struct{ at, setAt time.Time }

// deadlineSlack: a deadline that moves later by less than 1/64 of its
// length is not re-armed. Servers and clients push their deadlines a few
// microseconds later on every request, and re-arming a runtime timer each
// time costs more than the request's own work; the price is that a
// timeout may fire up to 1/64 (1.6%) of its length early.
const deadlineSlack = 64

// maxDeferred bounds the bytes held back; larger writes go out at once.
const maxDeferred = 64 << 10

// NewDeferredConn wraps c. always arms it for good (upstream clients); a
// server connection is armed per answer (see Begin and End). Connections
// that are not TCP are returned unchanged.
func NewDeferredConn(c net.Conn, always bool) net.Conn {
	tc, ok := c.(*net.TCPConn)
	if !ok || !deferredConns {
		return c
	}
	raw, err := tc.SyscallConn()
	if err != nil {
		return c
	}
	return &DeferredConn{TCPConn: tc, raw: raw, always: always}
}

// SetDeadline sets both deadlines (see SetReadDeadline).
func (c *DeferredConn) SetDeadline(t time.Time) error {
	if err := c.SetReadDeadline(t); err != nil {
		return err
	}
	return c.SetWriteDeadline(t)
}

// SetReadDeadline sets the read deadline, unless it only moves later by
// less than 1/64 of its length (see deadlineSlack).
func (c *DeferredConn) SetReadDeadline(t time.Time) error {
	return c.setDeadline(&c.readDL, t, c.TCPConn.SetReadDeadline)
}

// SetWriteDeadline is SetReadDeadline for writes.
func (c *DeferredConn) SetWriteDeadline(t time.Time) error {
	return c.setDeadline(&c.writeDL, t, c.TCPConn.SetWriteDeadline)
}

func (c *DeferredConn) setDeadline(d *deadline, t time.Time, set func(time.Time) error) error {
	c.mu.Lock()
	cur := d.at
	if t.Equal(cur) || (!cur.IsZero() && t.After(cur) && t.Sub(cur) < cur.Sub(d.setAt)/deadlineSlack) {
		c.mu.Unlock()
		return nil
	}
	d.at = t
	if !t.IsZero() {
		d.setAt = time.Now()
	}
	err := set(t)
	c.mu.Unlock()
	return err
}

// Begin marks the start of a request's handling on a server connection:
// writes go out at once again (a pipelined request may follow an armed
// answer, and a streamed answer must never wait), and the request counts
// as in hand. Every Begin needs its End.
func (c *DeferredConn) Begin() {
	busy.Add(1)
	c.arm(false)
}

// End marks the end of the handler. wholeAnswer arms the connection: the
// answer's writes are held back until the read of the next request.
func (c *DeferredConn) End(wholeAnswer bool) {
	c.arm(wholeAnswer)
	busy.Add(-1)
}

func (c *DeferredConn) arm(armed bool) {
	c.mu.Lock()
	c.armed = armed
	c.mu.Unlock()
}

// Write holds p back when armed, else writes it (after anything held).
func (c *DeferredConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	if (c.armed || c.always) && len(c.pending)+len(p) <= maxDeferred {
		if c.pending == nil {
			c.pending, c.spare = c.spare[:0], nil
		}
		c.pending = append(c.pending, p...)
		c.mu.Unlock()
		return len(p), nil
	}
	held := c.takeLocked()
	c.mu.Unlock()
	if len(held) > 0 {
		if err := c.writeAll(held); err != nil {
			return 0, err
		}
		c.recycle(held)
	}
	if err := c.writeAll(p); err != nil {
		return 0, err
	}
	return len(p), nil
}

// takeLocked hands the held bytes to the caller, who writes them.
func (c *DeferredConn) takeLocked() []byte {
	held := c.pending
	c.pending = nil
	return held
}

func (c *DeferredConn) recycle(b []byte) {
	c.mu.Lock()
	if c.spare == nil && cap(b) <= maxDeferred {
		c.spare = b[:0]
	}
	c.mu.Unlock()
}

// Read writes what is held, then waits for and reads the answer.
func (c *DeferredConn) Read(p []byte) (int, error) {
	c.mu.Lock()
	c.armed = false
	held := c.takeLocked()
	c.mu.Unlock()
	if len(held) == 0 {
		return c.readSome(p)
	}
	var (
		n, written int
		opErr      error
		writeDone  bool
	)
	err := c.raw.Read(func(fd uintptr) bool {
		if !writeDone {
			w, err := writeNonBlocking(fd, held)
			written = w
			switch {
			case err == nil:
				writeDone = true
				return false // nothing can have been answered yet: wait
			case errors.Is(err, syscall.EAGAIN):
				return true // a full send buffer: the waiting write below
			default:
				opErr = c.opError("write", err)
				return true
			}
		}
		n, opErr = c.readNonBlocking(fd, p)
		return !errors.Is(opErr, syscall.EAGAIN)
	})
	if err != nil { // deadline, or closed under us
		return 0, err
	}
	if opErr != nil {
		return n, opErr
	}
	if !writeDone {
		if err := c.writeAll(held[written:]); err != nil {
			return 0, err
		}
		c.recycle(held)
		return c.readSome(p)
	}
	c.recycle(held)
	return n, nil
}

// readSome reads at least one byte, waiting for readiness in the poller.
func (c *DeferredConn) readSome(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	var (
		n     int
		opErr error
	)
	err := c.raw.Read(func(fd uintptr) bool {
		n, opErr = c.readNonBlocking(fd, p)
		return !errors.Is(opErr, syscall.EAGAIN)
	})
	if err != nil {
		return 0, err
	}
	return n, opErr
}

// writeAll writes b whole, waiting for room in the poller when the send
// buffer is full.
func (c *DeferredConn) writeAll(b []byte) error {
	written := 0
	var opErr error
	err := c.raw.Write(func(fd uintptr) bool {
		w, err := writeNonBlocking(fd, b[written:])
		written += w
		if errors.Is(err, syscall.EAGAIN) {
			return false
		}
		if err != nil {
			opErr = c.opError("write", err)
		}
		return true
	})
	if err != nil {
		return err
	}
	return opErr
}

// readNonBlocking is one read(2): EAGAIN when nothing is there, io.EOF at
// the end.
func (c *DeferredConn) readNonBlocking(fd uintptr, p []byte) (int, error) {
	for {
		r, err := rawRead(fd, p)
		switch {
		case err == syscall.EINTR:
			continue
		case errors.Is(err, syscall.EAGAIN):
			return 0, err
		case err != nil:
			return 0, c.opError("read", err)
		case r == 0:
			return 0, io.EOF
		}
		return r, nil
	}
}

// writeNonBlocking writes as much of b as the send buffer takes; err is
// EAGAIN when it took less than all of it.
func writeNonBlocking(fd uintptr, b []byte) (int, error) {
	written := 0
	for written < len(b) {
		w, err := rawWrite(fd, b[written:])
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return written, err
		}
		if w == 0 {
			return written, syscall.EAGAIN
		}
		written += w
	}
	return written, nil
}

func (c *DeferredConn) opError(op string, err error) error {
	return &net.OpError{Op: op, Net: "tcp", Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: err}
}

// Close writes what is held, waiting up to closeFlushTimeout for a slow
// peer to take it, then closes.
func (c *DeferredConn) Close() error {
	c.mu.Lock()
	held, writeDL := c.takeLocked(), c.writeDL.at
	c.mu.Unlock()
	if len(held) > 0 {
		if limit := time.Now().Add(closeFlushTimeout); writeDL.IsZero() || limit.Before(writeDL) {
			_ = c.TCPConn.SetWriteDeadline(limit)
		}
		_ = c.writeAll(held)
	}
	return c.TCPConn.Close()
}

// closeFlushTimeout bounds how long Close waits to hand a held answer to a
// peer that reads slowly (a client that asked for Connection: close).
const closeFlushTimeout = 10 * time.Second

// busy counts the requests being handled on DeferredConns (Begin to End).
var busy atomic.Int32

// InHand is the number of requests whose handlers are running on
// DeferredConns (between Begin and End), process-wide.
func InHand() int { return int(busy.Load()) }

// rawWrite and rawRead call write(2) and read(2). Under load they do it
// without telling the scheduler: the socket is non-blocking, so neither can
// block, and a plain syscall's bookkeeping (and the P hand-off the system
// monitor does for calls it thinks are slow) costs more than the call
// itself. With at most one request in hand they use plain syscalls: the
// runtime then keeps a thread spinning that picks up the next request or
// answer without a wake-up, which is worth its CPU when the CPU is idle
// anyway (about 15 µs less per request at concurrency 1 on this VM).
func rawWrite(fd uintptr, p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	if busy.Load() <= 1 {
		return syscall.Write(int(fd), p)
	}
	n, _, e := syscall.RawSyscall(syscall.SYS_WRITE, fd, uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)))
	if e != 0 {
		return 0, e
	}
	return int(n), nil
}

func rawRead(fd uintptr, p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	if busy.Load() <= 1 {
		return syscall.Read(int(fd), p)
	}
	n, _, e := syscall.RawSyscall(syscall.SYS_READ, fd, uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)))
	if e != 0 {
		return 0, e
	}
	return int(n), nil
}

// DeferredListener wraps every accepted TCP connection in a DeferredConn
// that handlers arm per answer.
type DeferredListener struct{ net.Listener }

// Accept returns the next connection, wrapped.
func (l DeferredListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return NewDeferredConn(c, false), nil
}
