package adapters

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"sync"
)

// SSE framing bytes.
var (
	sseDataPrefix = []byte("data:")
	sseDone       = []byte("[DONE]")
	sseDoneEvent  = []byte("data: [DONE]\n\n")
)

// maxSSEEvent bounds one event, so a broken upstream can't exhaust memory.
const maxSSEEvent = 4 << 20

// ErrSSEEventTooLarge is returned for an event over 4 MiB.
var ErrSSEEventTooLarge = errors.New("sse: event larger than 4 MiB")

// SSEEvent is one server-sent event. Its slices are valid until the next call
// to Next.
type SSEEvent struct {
	Raw  []byte // the event as received, including its terminating blank line
	Data []byte // the data field(s), joined with \n when several
	Name []byte // the event field, if any
}

// Clone returns a copy that outlives the next call to Next.
func (e *SSEEvent) Clone() *SSEEvent {
	return &SSEEvent{Raw: bytes.Clone(e.Raw), Data: bytes.Clone(e.Data), Name: bytes.Clone(e.Name)}
}

// IsDone reports whether the event is OpenAI's "data: [DONE]" terminator.
func (e *SSEEvent) IsDone() bool { return bytes.Equal(e.Data, sseDone) }

// SSEReader splits a text/event-stream into events. An event that lies
// whole in its buffer is handed out as slices of that buffer, without a
// copy: Raw is the event's bytes as received, Data the value of its one
// data line (joined into a reused buffer only when it has several), Name
// the value of its event line. The bytes are consumed by the next call to
// Next, so they stay valid until then. An event longer than the buffer is
// gathered line by line into reused buffers.
type SSEReader struct {
	br      *bufio.Reader
	pending int      // bytes of the last event still in br: Next discards them first
	again   bool     // Next hands out last again (Unread)
	last    SSEEvent // the event Next returned last
	long    []byte   // a line longer than br's buffer, gathered
	raw     []byte   // the slow path's event, gathered
	data    []byte   // data lines joined (several of them, or the slow path)
	name    []byte
}

// sseBufSize is the reader's buffer. Events are a few hundred bytes and
// r (an upstream body) is buffered already; longer lines are gathered.
const sseBufSize = 2 << 10

// NewSSEReader reads events from r.
func NewSSEReader(r io.Reader) *SSEReader {
	return &SSEReader{br: bufio.NewReaderSize(r, sseBufSize)}
}

var sseReaders = sync.Pool{New: func() any { return NewSSEReader(nil) }}

// AcquireSSEReader is NewSSEReader from a pool; ReleaseSSEReader gives it
// back once its events are no longer used.
func AcquireSSEReader(r io.Reader) *SSEReader {
	s := sseReaders.Get().(*SSEReader)
	s.Reset(r)
	return s
}

// ReleaseSSEReader returns s to the pool of AcquireSSEReader. Neither s
// nor any event it returned may be used after.
func ReleaseSSEReader(s *SSEReader) {
	s.Reset(nil)
	if cap(s.long) > maxKeptLine {
		s.long = nil
	}
	if cap(s.raw) > maxKeptLine || cap(s.data) > maxKeptLine {
		s.raw, s.data = nil, nil
	}
	sseReaders.Put(s)
}

// maxKeptLine bounds the gathering buffers a pooled reader keeps.
const maxKeptLine = 64 << 10

// Reset reuses the reader for r.
func (s *SSEReader) Reset(r io.Reader) {
	s.br.Reset(r)
	s.pending, s.again, s.last = 0, false, SSEEvent{}
	s.raw, s.data, s.name = s.raw[:0], s.data[:0], s.name[:0]
}

// Buffered reports whether more bytes are already buffered, so the caller can
// hold a flush until the buffer runs dry.
func (s *SSEReader) Buffered() bool { return s.again || s.br.Buffered() > s.pending }

// Unread makes the next call to Next return the event the last one
// returned, whose bytes are still held.
func (s *SSEReader) Unread() { s.again = true }

// Next returns the next event. A stream that ends without a blank line after
// its last event still yields that event; then io.EOF follows.
func (s *SSEReader) Next() (SSEEvent, error) {
	if s.again {
		s.again = false
		return s.last, nil
	}
	if s.pending > 0 {
		_, _ = s.br.Discard(s.pending)
		s.pending = 0
	}
	for {
		buf, _ := s.br.Peek(s.br.Buffered())
		if ev, n, ok := s.scan(buf, false); ok {
			s.pending, s.last = n, ev
			return ev, nil
		}
		if len(buf) == s.br.Size() {
			// An event longer than the buffer: gather it.
			ev, err := s.gather()
			s.last = ev
			return ev, err
		}
		more, err := s.br.Peek(len(buf) + 1)
		if err == nil {
			continue
		}
		// The read may have moved the buffered bytes, and may have brought
		// some along with its error: look at them first.
		buf = more
		if ev, n, ok := s.scan(buf, false); ok {
			s.pending, s.last = n, ev
			return ev, nil
		}
		if errors.Is(err, io.EOF) {
			if ev, n, ok := s.scan(buf, true); ok {
				s.pending, s.last = n, ev
				return ev, nil
			}
		}
		return SSEEvent{}, err
	}
}

// scan looks in buf, which starts at an event's boundary, for a whole
// event: its lines up to and including the blank line that ends it, or at
// the end of the stream (atEOF) up to the end of buf. It skips what no
// event holds (blank lines, comments before a blank line). n is how many
// bytes of buf the event and what it skipped take.
func (s *SSEReader) scan(buf []byte, atEOF bool) (ev SSEEvent, n int, ok bool) {
	start, pos := 0, 0
	hasField, datas := false, 0
	var data, name []byte
	for pos < len(buf) {
		end := len(buf)
		next := end
		if i := bytes.IndexByte(buf[pos:], '\n'); i >= 0 {
			end, next = pos+i, pos+i+1
		} else if !atEOF {
			return ev, 0, false // the line is not whole yet
		}
		content := buf[pos:end]
		for len(content) > 0 && (content[len(content)-1] == '\r' || content[len(content)-1] == '\n') {
			content = content[:len(content)-1]
		}
		if len(content) == 0 {
			if hasField {
				return s.fastEvent(buf[start:next], data, name, datas), next, true
			}
			start = next // stray blank line, and the comments before it
		} else if content[0] != ':' {
			hasField = true
			f, value := sseField(content)
			switch string(f) {
			case "data":
				switch datas++; datas {
				case 1:
					data = value
				case 2:
					s.data = append(s.data[:0], data...)
					fallthrough
				default:
					if len(s.data) > 0 {
						s.data = append(s.data, '\n')
					}
					s.data = append(s.data, value...)
				}
			case "event":
				name = value
			}
		}
		pos = next
	}
	if atEOF && hasField {
		return s.fastEvent(buf[start:], data, name, datas), len(buf), true
	}
	return ev, 0, false
}

func (s *SSEReader) fastEvent(raw, data, name []byte, datas int) SSEEvent {
	if datas > 1 {
		data = s.data
	}
	return SSEEvent{Raw: raw, Data: data, Name: name}
}

// sseField splits a field line into its name and value (one leading space
// of the value dropped).
func sseField(line []byte) (name, value []byte) {
	name = line
	if i := bytes.IndexByte(line, ':'); i >= 0 {
		name, value = line[:i], line[i+1:]
		if len(value) > 0 && value[0] == ' ' {
			value = value[1:]
		}
	}
	return name, value
}

// gather reads an event line by line, copying it into reused buffers: the
// way for an event longer than the reader's buffer.
func (s *SSEReader) gather() (SSEEvent, error) {
	s.raw, s.data, s.name = s.raw[:0], s.data[:0], s.name[:0]
	hasField := false
	for {
		line, err := s.br.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			// A long line: gather it whole.
			full := append(s.long[:0], line...)
			for errors.Is(err, bufio.ErrBufferFull) {
				line, err = s.br.ReadSlice('\n')
				full = append(full, line...)
				if len(full) > maxSSEEvent {
					return SSEEvent{}, ErrSSEEventTooLarge
				}
			}
			s.long = full
			line = full
		}
		if len(line) > 0 {
			s.raw = append(s.raw, line...)
			if len(s.raw) > maxSSEEvent {
				return SSEEvent{}, ErrSSEEventTooLarge
			}
			content := bytes.TrimRight(line, "\r\n")
			if len(content) == 0 {
				if hasField {
					return s.event(), nil
				}
				s.raw = s.raw[:0] // stray blank line
				continue
			}
			if s.field(content) {
				hasField = true
			}
		}
		if err != nil {
			if hasField && errors.Is(err, io.EOF) {
				return s.event(), nil
			}
			return SSEEvent{}, err
		}
	}
}

func (s *SSEReader) event() SSEEvent {
	return SSEEvent{Raw: s.raw, Data: s.data, Name: s.name}
}

// field records one line and reports whether it was a field, not a comment.
func (s *SSEReader) field(line []byte) bool {
	if line[0] == ':' {
		return false
	}
	name, value := sseField(line)
	switch string(name) {
	case "data":
		if len(s.data) > 0 {
			s.data = append(s.data, '\n')
		}
		s.data = append(s.data, value...)
	case "event":
		s.name = append(s.name[:0], value...)
	}
	return true
}

// AppendSSEData appends one "data: <payload>\n\n" event to dst. The payload
// must not contain a newline (compact JSON never does).
func AppendSSEData(dst, payload []byte) []byte {
	dst = append(dst, sseDataPrefix...)
	dst = append(dst, ' ')
	dst = append(dst, payload...)
	return append(dst, '\n', '\n')
}

// AppendSSEDone appends the "data: [DONE]" terminator.
func AppendSSEDone(dst []byte) []byte { return append(dst, sseDoneEvent...) }

// WriteSSEData writes one data event to w.
func WriteSSEData(w io.Writer, payload []byte) error {
	if bytes.IndexByte(payload, '\n') >= 0 {
		return fmt.Errorf("sse: payload holds a newline")
	}
	buf := AppendSSEData(make([]byte, 0, len(payload)+8), payload)
	_, err := w.Write(buf)
	return err
}
