package adapters

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
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

// SSEReader splits a text/event-stream into events.
type SSEReader struct {
	br   *bufio.Reader
	long []byte // a line longer than br's buffer, gathered
	raw  []byte
	data []byte
	name []byte
}

// sseBufSize is the reader's buffer. Events are a few hundred bytes and
// r (an upstream body) is buffered already; longer lines are gathered.
const sseBufSize = 2 << 10

// NewSSEReader reads events from r.
func NewSSEReader(r io.Reader) *SSEReader {
	return &SSEReader{br: bufio.NewReaderSize(r, sseBufSize)}
}

// Reset reuses the reader for r.
func (s *SSEReader) Reset(r io.Reader) { s.br.Reset(r) }

// Buffered reports whether more bytes are already buffered, so the caller can
// hold a flush until the buffer runs dry.
func (s *SSEReader) Buffered() bool { return s.br.Buffered() > 0 }

// Next returns the next event. A stream that ends without a blank line after
// its last event still yields that event; then io.EOF follows.
func (s *SSEReader) Next() (SSEEvent, error) {
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
	name, value := line, []byte(nil)
	if i := bytes.IndexByte(line, ':'); i >= 0 {
		name, value = line[:i], line[i+1:]
		if len(value) > 0 && value[0] == ' ' {
			value = value[1:]
		}
	}
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
