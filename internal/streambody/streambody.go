// Package streambody writes a streamed response body on the connection's
// own goroutine, each flush one HTTP chunk (see Set).
package streambody

import (
	"errors"
	"io"
	"sync"

	"github.com/valyala/fasthttp"
)

// Set makes write the response body, like ctx.SetBodyStreamWriter,
// but write runs on the connection's own goroutine: fasthttp calls
// streamBody.WriteTo, which frames each flush of w as one chunk straight
// into the connection's buffer. SetBodyStreamWriter instead starts a
// goroutine per response that writes into an in-memory pipe the connection
// copies from: a second stack, a pipe and two goroutine hand-offs per chunk
// for every open stream.
//
// Each Flush of w sends what it holds as one chunk. If the response is
// never written (the connection broke first, or the body was reset), Close
// runs write against a failing writer, so its clean-up runs exactly once,
// as for a client that went away.
func Set(ctx *fasthttp.RequestCtx, write func(w Writer)) {
	ctx.SetBodyStream(&streamBody{write: write}, -1)
}

// streamBufSize is the most a stream buffers between flushes: events that
// arrive together leave in one chunk and one system call.
const streamBufSize = 2 << 10

// streamBufs holds the buffers of streams between flushes; an idle stream
// (waiting for its next token) holds none.
var streamBufs = sync.Pool{New: func() any { b := make([]byte, 0, streamBufSize); return &b }}

// Writer is what a stream body's writer gets: each Flush sends what
// was written since the last one.
type Writer interface {
	io.Writer
	Flush() error
}

type streamBody struct {
	write func(w Writer)
	once  sync.Once
	cw    chunkWriter    // what write writes to, in WriteTo
	pr    *io.PipeReader // only when fasthttp reads instead of calling WriteTo
}

var (
	_ fasthttp.BodyWriterTo = (*streamBody)(nil)
	_ io.ReadCloser         = (*streamBody)(nil)
	_ Writer                = (*chunkWriter)(nil)
)

var errStreamWritten = errors.New("stream body already written")

// SupportsBodyWriteTo lets fasthttp call WriteTo instead of Read.
func (s *streamBody) SupportsBodyWriteTo() bool { return true }

// WriteTo runs write against w, fasthttp's chunk framer.
func (s *streamBody) WriteTo(w io.Writer) (int64, error) {
	cw := &s.cw
	ran := false
	s.once.Do(func() {
		ran = true
		cw.w = w
		defer cw.release()
		s.write(cw)
		_ = cw.Flush()
	})
	if !ran {
		return 0, errStreamWritten
	}
	return cw.n, cw.err
}

// Read is the fallback for a reader of the body (fasthttp uses WriteTo):
// write runs on a goroutine of its own, into a pipe.
func (s *streamBody) Read(p []byte) (int, error) {
	if s.pr == nil {
		pr, pw := io.Pipe()
		s.pr = pr
		go func() {
			_, err := s.WriteTo(pw)
			_ = pw.CloseWithError(err)
		}()
	}
	return s.pr.Read(p)
}

// Close runs write for its clean-up if the body was never written.
func (s *streamBody) Close() error {
	if s.pr != nil {
		_ = s.pr.Close()
	}
	s.once.Do(func() { s.write(&chunkWriter{err: errNotSent}) })
	return nil
}

var errNotSent = errors.New("response not sent")

// chunkWriter buffers writes until Flush in a pooled buffer, taken on the
// first write after a flush and returned by the flush. It keeps the first
// error of w and fails every write after it.
type chunkWriter struct {
	w   io.Writer
	buf *[]byte
	n   int64
	err error
}

func (c *chunkWriter) Write(p []byte) (int, error) {
	if c.err != nil {
		return 0, c.err
	}
	if c.buf != nil && len(*c.buf)+len(p) > cap(*c.buf) {
		if err := c.Flush(); err != nil {
			return 0, err
		}
	}
	if len(p) >= streamBufSize {
		return c.send(p)
	}
	if c.buf == nil {
		c.buf = streamBufs.Get().(*[]byte)
	}
	*c.buf = append(*c.buf, p...)
	return len(p), nil
}

// Flush sends what is buffered as one chunk.
func (c *chunkWriter) Flush() error {
	if c.err != nil {
		return c.err
	}
	if c.buf == nil {
		return nil
	}
	_, err := c.send(*c.buf)
	c.release()
	return err
}

func (c *chunkWriter) send(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	c.err = err
	return n, err
}

func (c *chunkWriter) release() {
	if c.buf != nil {
		*c.buf = (*c.buf)[:0]
		streamBufs.Put(c.buf)
		c.buf = nil
	}
}
