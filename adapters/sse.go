package adapters

import (
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

// SSEReader splits a text/event-stream into events. Events are handed out
// as slices of the reader's buffer, without a copy: Raw is the event's
// bytes as received, Data the value of its one data line (joined into a
// reused buffer only when it has several), Name the value of its event
// line. The bytes are consumed by the next call to Next, so they stay
// valid until then.
//
// A read with nothing buffered goes into a small array of the reader's
// own (first), where a node's event, which comes in a read of its own, is
// handed out from; only bytes that outgrow it move to a buffer taken from
// a pool, given back once they are all consumed: a stream waiting for its
// next event holds no pooled buffer. An event longer than the pooled
// buffer is read into a larger one, up to 4 MiB.
type SSEReader struct {
	src     io.Reader
	small   *[]byte // the pooled buffer held, if any
	buf     []byte  // the buffer in use: first, *small, big, or nil
	big     []byte  // a buffer grown for a long event, kept for the next
	r, w    int     // buf[r:w] is read and not yet consumed
	pending int     // bytes of the last event, consumed by the next Next
	scanned int     // buf[r:r+scanned] holds no event's end
	field   bool    // a field line lies in buf[r:r+scanned]
	err     error   // the read error, once buf holds no event
	again   bool    // Next hands out last again (Unread)
	last    SSEEvent
	data    []byte             // several data lines, joined
	first   [sseFirstSize]byte // what a read with nothing buffered goes into
}

// sseBufSize is the pooled buffer. Events are a few hundred bytes and the
// source (an upstream body) is buffered already.
const sseBufSize = 2 << 10

// sseFirstSize is the reader's own array, which the first read after its
// buffered events are consumed goes into: big enough for the event of a
// token (about 250 bytes from vLLM), small beside the pooled buffer.
const sseFirstSize = 512

// sseBufs holds the buffers of readers between their reads.
var sseBufs = sync.Pool{New: func() any { b := make([]byte, sseBufSize); return &b }}

// NewSSEReader reads events from r.
func NewSSEReader(r io.Reader) *SSEReader { return &SSEReader{src: r} }

var sseReaders = sync.Pool{New: func() any { return new(SSEReader) }}

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
	sseReaders.Put(s)
}

// maxKept bounds the grown buffers a reader keeps for its next long event.
const maxKept = 64 << 10

// Reset reuses the reader for r.
func (s *SSEReader) Reset(r io.Reader) {
	s.putSmall()
	if cap(s.big) > maxKept {
		s.big = nil
	}
	if cap(s.data) > maxKept {
		s.data = nil
	}
	s.src, s.buf, s.r, s.w, s.pending, s.scanned, s.field = r, nil, 0, 0, 0, 0, false
	s.err, s.again, s.last = nil, false, SSEEvent{}
}

func (s *SSEReader) putSmall() {
	if s.small != nil {
		sseBufs.Put(s.small)
		s.small = nil
	}
}

// Buffered reports whether more bytes are already buffered, so the caller can
// hold a flush until the buffer runs dry.
func (s *SSEReader) Buffered() bool { return s.again || s.w-s.r > s.pending }

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
	s.consume()
	for {
		b := s.buf[s.r:s.w]
		if s.scanned == 0 {
			if ev, n, ok := oneDataLine(b); ok {
				s.pending, s.last = n, ev
				return ev, nil
			}
		}
		if end := s.eventEnd(b); end >= 0 {
			return s.hand(b[:end], false), nil
		}
		if s.err != nil {
			if errors.Is(s.err, io.EOF) {
				if ev, n, ok := s.scan(b, true); ok {
					s.pending, s.last = n, ev
					return ev, nil
				}
			}
			return SSEEvent{}, s.err
		}
		if err := s.fill(); err != nil {
			return SSEEvent{}, err
		}
	}
}

// oneDataLine splits off the event every engine sends, when b starts with
// it whole: one data line, ended by a bare LF, and the blank line (a bare
// LF) after it. It is what eventEnd and scan make of those bytes, found
// with one search for the line's end; ok is false for anything else, which
// the general path reads.
func oneDataLine(b []byte) (ev SSEEvent, n int, ok bool) {
	if !bytes.HasPrefix(b, sseDataPrefix) {
		return ev, 0, false
	}
	i := bytes.IndexByte(b, '\n')
	if i < 0 || i+1 >= len(b) || b[i+1] != '\n' || b[i-1] == '\r' {
		return ev, 0, false
	}
	value := b[len(sseDataPrefix):i]
	if len(value) > 0 && value[0] == ' ' {
		value = value[1:]
	}
	return SSEEvent{Raw: b[:i+2], Data: value}, i + 2, true
}

// hand returns the event that b (up to its end) holds.
func (s *SSEReader) hand(b []byte, atEOF bool) SSEEvent {
	ev, n, _ := s.scan(b, atEOF)
	s.pending, s.last = n, ev
	return ev
}

// consume drops the last event's bytes, and gives the buffer back once it
// holds nothing more.
func (s *SSEReader) consume() {
	s.r += s.pending
	s.pending, s.scanned, s.field = 0, 0, false
	if s.r == s.w {
		s.putSmall()
		s.buf, s.r, s.w = nil, 0, 0
	}
}

// eventEnd is how many bytes of b, which starts at an event's boundary,
// the first whole event takes (with what comes before it: blank lines,
// comments), or -1. It goes on from where the last call stopped.
func (s *SSEReader) eventEnd(b []byte) int {
	for {
		i := bytes.IndexByte(b[s.scanned:], '\n')
		if i < 0 {
			return -1
		}
		line, next := b[s.scanned:s.scanned+i], s.scanned+i+1
		line = bytes.TrimRight(line, "\r\n")
		switch {
		case len(line) > 0:
			s.field = s.field || line[0] != ':'
		case s.field:
			return next
		}
		s.scanned = next
	}
}

// fill reads more of the stream. With nothing buffered it reads into
// first, holding no pooled buffer.
func (s *SSEReader) fill() error {
	if s.r == s.w {
		n, err := s.readEmpty(s.first[:])
		s.buf, s.r, s.w = s.first[:], 0, n
		s.err = err
		return nil
	}
	if s.w == len(s.buf) {
		if err := s.makeRoom(); err != nil {
			return err
		}
	}
	n, err := s.readEmpty(s.buf[s.w:])
	s.w += n
	s.err = err
	return nil
}

// makeRoom makes room after the unconsumed bytes: it moves them from a
// full first to a pooled buffer, slides them to the front of the buffer,
// or, when they fill it, moves them to a larger one.
func (s *SSEReader) makeRoom() error {
	if s.small == nil && len(s.buf) == sseFirstSize {
		// first is full: more is coming than one event a read.
		s.small = sseBufs.Get().(*[]byte)
		s.w = copy(*s.small, s.buf[s.r:s.w])
		s.buf, s.r = *s.small, 0
		return nil
	}
	if s.r > 0 {
		copy(s.buf, s.buf[s.r:s.w])
		s.w -= s.r
		s.r = 0
		return nil
	}
	if len(s.buf) >= maxSSEEvent {
		return ErrSSEEventTooLarge
	}
	size := min(2*len(s.buf), maxSSEEvent)
	if cap(s.big) < size {
		s.big = make([]byte, size)
	}
	big := s.big[:size]
	copy(big, s.buf[:s.w])
	s.putSmall()
	s.buf = big
	return nil
}

// readEmpty reads into p, retrying a read that returns nothing and no
// error, as bufio does.
func (s *SSEReader) readEmpty(p []byte) (int, error) {
	for range 100 {
		n, err := s.src.Read(p)
		if n > 0 || err != nil {
			return n, err
		}
	}
	return 0, io.ErrNoProgress
}

// scan parses the event at the start of buf: its lines up to and
// including the blank line that ends it, or at the end of the stream
// (atEOF) up to the end of buf. It skips what no event holds (blank lines,
// comments before a blank line). n is how many bytes of buf the event and
// what it skipped take.
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
		content := bytes.TrimRight(buf[pos:end], "\r\n")
		if len(content) == 0 {
			if hasField {
				return s.event(buf[start:next], data, name, datas), next, true
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
		return s.event(buf[start:], data, name, datas), len(buf), true
	}
	return ev, 0, false
}

func (s *SSEReader) event(raw, data, name []byte, datas int) SSEEvent {
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

// AppendSSEData appends one "data: <payload>\n\n" event to dst. A CR or
// LF in the payload, which would end the data line, is written as a space:
// in JSON it can only be whitespace between tokens (compact JSON has none).
func AppendSSEData(dst, payload []byte) []byte {
	dst = append(dst, sseDataPrefix...)
	dst = append(dst, ' ')
	start := len(dst)
	dst = append(dst, payload...)
	if bytes.ContainsAny(payload, "\r\n") {
		for i, c := range dst[start:] {
			if c == '\r' || c == '\n' {
				dst[start+i] = ' '
			}
		}
	}
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
