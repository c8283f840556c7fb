package router

import (
	"bufio"
	"errors"
	"io"
	"sync"

	"github.com/valyala/fasthttp"
)

// setStreamBody makes write the response body, like ctx.SetBodyStreamWriter,
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
func setStreamBody(ctx *fasthttp.RequestCtx, write func(w *bufio.Writer)) {
	ctx.SetBodyStream(&streamBody{write: write}, -1)
}

// streamBufSize is the buffer between write and the chunk framing: events
// that arrive together leave in one chunk and one system call.
const streamBufSize = 2 << 10

var streamBufs = sync.Pool{New: func() any { return bufio.NewWriterSize(nil, streamBufSize) }}

type streamBody struct {
	write func(w *bufio.Writer)
	once  sync.Once
	pr    *io.PipeReader // only when fasthttp reads instead of calling WriteTo
}

var (
	_ fasthttp.BodyWriterTo = (*streamBody)(nil)
	_ io.ReadCloser         = (*streamBody)(nil)
)

var errStreamWritten = errors.New("stream body already written")

// SupportsBodyWriteTo lets fasthttp call WriteTo instead of Read.
func (s *streamBody) SupportsBodyWriteTo() bool { return true }

// WriteTo runs write against w (fasthttp's chunk framer) through a pooled
// buffer.
func (s *streamBody) WriteTo(w io.Writer) (int64, error) {
	ew := &errWriter{w: w}
	ran := false
	s.once.Do(func() {
		ran = true
		bw := streamBufs.Get().(*bufio.Writer)
		bw.Reset(ew)
		defer func() {
			bw.Reset(nil)
			streamBufs.Put(bw)
		}()
		s.write(bw)
		_ = bw.Flush()
	})
	if !ran {
		return 0, errStreamWritten
	}
	return ew.n, ew.err
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
	s.once.Do(func() { s.write(bufio.NewWriterSize(&errWriter{err: errNotSent}, 16)) })
	return nil
}

var errNotSent = errors.New("response not sent")

// errWriter keeps the first error of w and fails every write after it.
type errWriter struct {
	w   io.Writer
	n   int64
	err error
}

func (e *errWriter) Write(p []byte) (int, error) {
	if e.err != nil {
		return 0, e.err
	}
	n, err := e.w.Write(p)
	e.n += int64(n)
	e.err = err
	return n, err
}
