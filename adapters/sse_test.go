package adapters

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"
)

func TestSSEReaderSplitsEvents(t *testing.T) {
	in := ": keep-alive\n\n" +
		"data: {\"a\":1}\n\n" +
		"event: ping\r\ndata: x\r\ndata: y\r\n\r\n" +
		"data:" + strings.Repeat("z", 10000) + "\n\n" +
		"data: [DONE]"
	for name, r := range map[string]io.Reader{
		"whole":    strings.NewReader(in),
		"one-byte": iotest.OneByteReader(strings.NewReader(in)),
	} {
		sr := NewSSEReader(r)
		var got []string
		for {
			ev, err := sr.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			got = append(got, string(ev.Name)+"|"+string(ev.Data))
			if ev.IsDone() != (string(ev.Data) == "[DONE]") {
				t.Fatalf("IsDone wrong for %q", ev.Data)
			}
		}
		want := []string{"|{\"a\":1}", "ping|x\ny", "|" + strings.Repeat("z", 10000), "|[DONE]"}
		if strings.Join(got, ",") != strings.Join(want, ",") {
			t.Fatalf("%s: got %d events, first %.40q", name, len(got), got)
		}
	}
}

func TestSSERoundTrip(t *testing.T) {
	var buf bytes.Buffer
	if err := WriteSSEData(&buf, []byte(`{"x":"y"}`)); err != nil {
		t.Fatal(err)
	}
	buf.Write(AppendSSEDone(nil))
	if err := WriteSSEData(&buf, []byte("a\nb")); err == nil {
		t.Fatal("a payload with a newline must be refused")
	}
	sr := NewSSEReader(&buf)
	ev, err := sr.Next()
	if err != nil || string(ev.Data) != `{"x":"y"}` || string(ev.Raw) != "data: {\"x\":\"y\"}\n\n" {
		t.Fatalf("got %q %q %v", ev.Data, ev.Raw, err)
	}
	ev, err = sr.Next()
	if err != nil || !ev.IsDone() {
		t.Fatalf("want DONE, got %q %v", ev.Data, err)
	}
	if _, err = sr.Next(); !errors.Is(err, io.EOF) {
		t.Fatalf("want EOF, got %v", err)
	}
}

func TestSSEEventTooLarge(t *testing.T) {
	sr := NewSSEReader(strings.NewReader("data: " + strings.Repeat("a", maxSSEEvent+10) + "\n\n"))
	if _, err := sr.Next(); !errors.Is(err, ErrSSEEventTooLarge) {
		t.Fatalf("want ErrSSEEventTooLarge, got %v", err)
	}
}
