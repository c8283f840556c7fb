package adapters

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"
)

// refSSEReader is the line-by-line reader SSEReader replaced (every line
// copied into the event): the reference its framing is held to.
type refSSEReader struct {
	br              *bufio.Reader
	raw, data, name []byte
}

func (s *refSSEReader) next() (SSEEvent, error) {
	s.raw, s.data, s.name = s.raw[:0], s.data[:0], s.name[:0]
	hasField := false
	for {
		line, err := s.br.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			full := append([]byte(nil), line...)
			for errors.Is(err, bufio.ErrBufferFull) {
				line, err = s.br.ReadSlice('\n')
				full = append(full, line...)
			}
			line = full
		}
		if len(line) > 0 {
			s.raw = append(s.raw, line...)
			content := bytes.TrimRight(line, "\r\n")
			if len(content) == 0 {
				if hasField {
					return SSEEvent{Raw: s.raw, Data: s.data, Name: s.name}, nil
				}
				s.raw = s.raw[:0]
				continue
			}
			if content[0] != ':' {
				hasField = true
				name, value := content, []byte(nil)
				if i := bytes.IndexByte(content, ':'); i >= 0 {
					name, value = content[:i], content[i+1:]
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
			}
		}
		if err != nil {
			if hasField && errors.Is(err, io.EOF) {
				return SSEEvent{Raw: s.raw, Data: s.data, Name: s.name}, nil
			}
			return SSEEvent{}, err
		}
	}
}

// sseEvents reads every event of r, as "raw|data|name" strings, and the
// error that ended the stream (nil for io.EOF).
func sseEvents(next func() (SSEEvent, error)) ([]string, error) {
	var out []string
	for {
		ev, err := next()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return out, err
		}
		out = append(out, string(ev.Raw)+"|"+string(ev.Data)+"|"+string(ev.Name))
	}
}

// chunkedReader returns its input in reads of the sizes in cuts, in turn.
type chunkedReader struct {
	b    []byte
	cuts []byte
	i    int
}

func (c *chunkedReader) Read(p []byte) (int, error) {
	if len(c.b) == 0 {
		return 0, io.EOF
	}
	n := len(c.b)
	if len(c.cuts) > 0 {
		n = int(c.cuts[c.i%len(c.cuts)])%97 + 1
		c.i++
	}
	n = min(n, len(p), len(c.b))
	copy(p, c.b[:n])
	c.b = c.b[n:]
	return n, nil
}

// checkSSEFraming holds SSEReader to refSSEReader on in, read in pieces
// of the sizes cuts gives, and to the same events read whole.
func checkSSEFraming(t *testing.T, in []byte, cuts []byte) {
	t.Helper()
	ref := &refSSEReader{br: bufio.NewReaderSize(bytes.NewReader(in), sseBufSize)}
	want, wantErr := sseEvents(ref.next)
	sr := NewSSEReader(&chunkedReader{b: in, cuts: cuts})
	got, err := sseEvents(sr.Next)
	if (err != nil) != (wantErr != nil) || strings.Join(got, "\x00") != strings.Join(want, "\x00") {
		t.Fatalf("%q cut %v:\n got %q (%v)\nwant %q (%v)", in, cuts, got, err, want, wantErr)
	}
}

// TestSSEFraming reads streams whose events lie whole in the buffer (the
// copy-free path), straddle reads, or outgrow the buffer (gathered), with
// CRLF and bare LF line ends, comments, stray blank lines, several data
// lines, named events and a last event without its blank line, in every
// way of cutting the reads: the events are the reference reader's.
func TestSSEFraming(t *testing.T) {
	long := strings.Repeat("x", 3*sseBufSize)
	for _, in := range []string{
		"data: {\"a\":1}\n\ndata: [DONE]\n\n",
		"data: a\r\n\r\ndata: b\r\n\r\n",
		": keep-alive\n\n\n\ndata: a\n\n",
		": c1\n: c2\ndata: a\n\n",
		"event: error\ndata: {\"error\":{}}\n\n",
		"data: a\ndata: b\ndata:\ndata: c\n\n",
		"data:\ndata: b\n\n",
		"data\n\nevent\n\nid: 1\n\n",
		"data: a\r\r\n\r\n",
		"data: last without blank line",
		"data: last with one newline\n",
		"\n\n\r\n",
		": only a comment",
		"data: " + long + "\n\ndata: after\n\n",
		"data: a\n" + ": " + long + "\ndata: b\n\n",
		strings.Repeat("data: x\n\n", 400),
		"data: " + long[:sseBufSize-8] + "\n\ndata: y\n\n",
		"event: a\nevent: b\ndata: z\n\n",
		// The last event, at the end of the stream, after the read that
		// found the end moved the buffered bytes.
		"\n\r\n: x::x::\n\r\r:\n::\n\n:x\r\n:\r  :\n\rx:\n:d\r:  \nd\r\r",
		"data: first\n\ndata: tail at the end",
	} {
		for _, cuts := range [][]byte{nil, {0}, {1}, {6}, {30, 2, 90}, {148, 161}} {
			checkSSEFraming(t, []byte(in), cuts)
		}
	}
}

// FuzzSSEFraming holds SSEReader to the reference reader on any bytes,
// read in any pieces.
func FuzzSSEFraming(f *testing.F) {
	for _, s := range []string{
		"data: {\"a\":1}\n\ndata: [DONE]\n\n",
		"event: x\r\ndata: a\r\ndata: b\r\n\r\n: c\n\n",
		"data: " + strings.Repeat("y", 2100) + "\n\n",
		"\n\ndata",
	} {
		f.Add([]byte(s), []byte{3, 40})
	}
	f.Fuzz(func(t *testing.T, in, cuts []byte) {
		checkSSEFraming(t, in, cuts)
	})
}

// TestSSEUnread: the event handed out again by Unread is the same, and
// the stream goes on after it.
func TestSSEUnread(t *testing.T) {
	sr := AcquireSSEReader(iotest.HalfReader(strings.NewReader("data: a\n\ndata: b\n\n")))
	defer ReleaseSSEReader(sr)
	first, err := sr.Next()
	if err != nil || string(first.Data) != "a" {
		t.Fatalf("got %q %v", first.Data, err)
	}
	sr.Unread()
	if !sr.Buffered() {
		t.Fatal("an unread event counts as buffered")
	}
	for _, want := range []string{"a", "b"} {
		ev, err := sr.Next()
		if err != nil || string(ev.Data) != want || string(ev.Raw) != "data: "+want+"\n\n" {
			t.Fatalf("want %q, got %q %q %v", want, ev.Data, ev.Raw, err)
		}
	}
	if _, err := sr.Next(); !errors.Is(err, io.EOF) {
		t.Fatalf("want EOF, got %v", err)
	}
}

// loopReader repeats its bytes forever.
type loopReader struct {
	b []byte
	i int
}

func (l *loopReader) Read(p []byte) (int, error) {
	n := 0
	for n < len(p) {
		c := copy(p[n:], l.b[l.i:])
		n += c
		l.i = (l.i + c) % len(l.b)
	}
	return n, nil
}

// BenchmarkSSENext is the per-event path of a relayed stream: split the
// next event off the node's bytes. It allocates nothing.
func BenchmarkSSENext(b *testing.B) {
	ev := "data: {\"id\":\"chatcmpl-5916b453be108dc30000000000000001\",\"object\":\"chat.completion.chunk\",\"created\":1796301454,\"model\":\"qwen3-8b\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"people \"},\"logprobs\":null,\"finish_reason\":null}]}\n\n"
	sr := NewSSEReader(&loopReader{b: []byte(ev)})
	b.SetBytes(int64(len(ev)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := sr.Next(); err != nil {
			b.Fatal(err)
		}
	}
}

// eventReader hands out its bytes one event a read, as an engine's chunks
// arrive (each flush of the node is one chunk of its answer).
type eventReader struct {
	b   []byte
	off int
}

func (e *eventReader) Read(p []byte) (int, error) {
	rest := e.b[e.off:]
	if i := bytes.Index(rest, []byte("\n\n")); i >= 0 {
		rest = rest[:i+2]
	}
	n := copy(p, rest)
	e.off = (e.off + n) % len(e.b)
	return n, nil
}

// BenchmarkSSENextPerRead is BenchmarkSSENext with each event in a read of
// its own, as a node's tokens arrive: the reader's buffer is given back
// and taken again for every event.
func BenchmarkSSENextPerRead(b *testing.B) {
	ev := "data: {\"id\":\"chatcmpl-5916b453be108dc30000000000000001\",\"object\":\"chat.completion.chunk\",\"created\":1796301454,\"model\":\"qwen3-8b\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"people \"},\"logprobs\":null,\"finish_reason\":null}]}\n\n"
	sr := NewSSEReader(&eventReader{b: []byte(ev)})
	b.SetBytes(int64(len(ev)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := sr.Next(); err != nil {
			b.Fatal(err)
		}
	}
}
