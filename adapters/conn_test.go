package adapters

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"testing"
	"time"
)

// peer is the far end of a DeferredConn: it records what arrives and
// answers when told to.
type peer struct {
	conn net.Conn
	got  chan []byte
}

func deferredPair(t *testing.T, always bool) (*DeferredConn, *peer) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err == nil {
			accepted <- c
		}
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	dc, ok := NewDeferredConn(c, always).(*DeferredConn)
	if !ok {
		t.Fatal("a TCP connection was not wrapped")
	}
	p := &peer{conn: <-accepted, got: make(chan []byte, 64)}
	go func() {
		buf := make([]byte, 1<<20)
		for {
			n, err := p.conn.Read(buf)
			if n > 0 {
				p.got <- append([]byte(nil), buf[:n]...)
			}
			if err != nil {
				close(p.got)
				return
			}
		}
	}()
	t.Cleanup(func() { dc.Close(); p.conn.Close() })
	return dc, p
}

// waitFor waits for want bytes at the peer, for at most d.
func (p *peer) waitFor(want []byte, d time.Duration) error {
	var got []byte
	deadline := time.After(d)
	for !bytes.Equal(got, want) {
		select {
		case b, ok := <-p.got:
			if !ok {
				return fmt.Errorf("peer closed after %q, want %q", got, want)
			}
			got = append(got, b...)
		case <-deadline:
			return fmt.Errorf("peer got %.40q within %s, want %.40q", got, d, want)
		}
	}
	return nil
}

// received is waitFor for the test goroutine.
func (p *peer) received(t *testing.T, want []byte, d time.Duration) {
	t.Helper()
	if err := p.waitFor(want, d); err != nil {
		t.Fatal(err)
	}
}

// nothing asserts that no bytes reach the peer within d.
func (p *peer) nothing(t *testing.T, d time.Duration) {
	t.Helper()
	select {
	case b := <-p.got:
		t.Fatalf("peer got %q, want nothing yet", b)
	case <-time.After(d):
	}
}

func TestDeferredConnRoundTrips(t *testing.T) {
	dc, p := deferredPair(t, true)
	buf := make([]byte, 64)
	for i := 0; i < 50; i++ {
		req := []byte("request " + string(rune('a'+i%26)))
		if n, err := dc.Write(req); err != nil || n != len(req) {
			t.Fatalf("write: %d %v", n, err)
		}
		peerErr := make(chan error, 1)
		go func() {
			err := p.waitFor(req, 2*time.Second)
			if err == nil {
				_, err = p.conn.Write([]byte("answer"))
			}
			peerErr <- err
		}()
		_ = dc.SetReadDeadline(time.Now().Add(3 * time.Second))
		n, err := io.ReadAtLeast(dc, buf, len("answer"))
		if err != nil || string(buf[:n]) != "answer" {
			t.Fatalf("round %d: read %q %v (peer: %v)", i, buf[:n], err, <-peerErr)
		}
		if err := <-peerErr; err != nil {
			t.Fatal(err)
		}
	}
}

func TestDeferredConnHoldsUntilRead(t *testing.T) {
	dc, p := deferredPair(t, true)
	if _, err := dc.Write([]byte("held")); err != nil {
		t.Fatal(err)
	}
	p.nothing(t, 50*time.Millisecond)
	_ = dc.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
	_, err := dc.Read(make([]byte, 8))
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read without an answer: %v, want a deadline error", err)
	}
	p.received(t, []byte("held"), time.Second) // written by the read
}

func TestDeferredConnLargeWritesGoOutAtOnce(t *testing.T) {
	dc, p := deferredPair(t, true)
	big := bytes.Repeat([]byte("x"), maxDeferred+1)
	go func() { _, _ = dc.Write(big) }()
	p.received(t, big, 5*time.Second)
}

func TestDeferredConnCloseFlushes(t *testing.T) {
	dc, p := deferredPair(t, true)
	_, _ = dc.Write([]byte("last words"))
	if err := dc.Close(); err != nil {
		t.Fatal(err)
	}
	p.received(t, []byte("last words"), time.Second)
}

func TestDeferredConnCloseDoesNotWaitForARead(t *testing.T) {
	dc, p := deferredPair(t, true)
	_, _ = dc.Write([]byte("question"))
	errc := make(chan error, 1)
	go func() {
		_, err := dc.Read(make([]byte, 8))
		errc <- err
	}()
	p.received(t, []byte("question"), time.Second)
	closed := make(chan struct{})
	go func() { dc.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(time.Second):
		t.Fatal("Close blocked behind a waiting Read")
	}
	select {
	case err := <-errc:
		if err == nil {
			t.Fatal("read on a closed connection succeeded")
		}
	case <-time.After(time.Second):
		t.Fatal("the waiting Read did not end on Close")
	}
}

func TestDeferredConnPeerClose(t *testing.T) {
	dc, p := deferredPair(t, true)
	_, _ = dc.Write([]byte("anyone?"))
	peerErr := make(chan error, 1)
	go func() {
		peerErr <- p.waitFor([]byte("anyone?"), time.Second)
		p.conn.Close()
	}()
	_ = dc.SetReadDeadline(time.Now().Add(2 * time.Second))
	if _, err := dc.Read(make([]byte, 8)); err != io.EOF {
		t.Fatalf("read after the peer closed: %v, want io.EOF", err)
	}
	if err := <-peerErr; err != nil {
		t.Fatal(err)
	}
}

// A server connection holds writes only when armed: a streamed answer,
// written unarmed, goes out at once.
func TestDeferredConnServerArming(t *testing.T) {
	dc, p := deferredPair(t, false)
	_, _ = dc.Write([]byte("chunk 1"))
	p.received(t, []byte("chunk 1"), time.Second)
	dc.Begin()
	dc.End(true)
	_, _ = dc.Write([]byte("whole answer"))
	p.nothing(t, 50*time.Millisecond)
	dc.Begin() // a later unarmed write sends what was held first, in order
	_, _ = dc.Write([]byte(" + more"))
	dc.End(false)
	p.received(t, []byte("whole answer + more"), time.Second)
	if n := busy.Load(); n != 0 {
		t.Fatalf("%d requests still count as in hand", n)
	}
}

func TestNewDeferredConnLeavesOtherConnsAlone(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	if c := NewDeferredConn(a, true); c != a {
		t.Fatalf("a pipe was wrapped: %T", c)
	}
}

func TestDeferredConnDeadlines(t *testing.T) {
	dc, p := deferredPair(t, false)
	read := func() (time.Duration, error) {
		start := time.Now()
		_, err := dc.Read(make([]byte, 8))
		return time.Since(start), err
	}
	// An earlier deadline always takes effect.
	_ = dc.SetReadDeadline(time.Now().Add(time.Hour))
	_ = dc.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	if d, err := read(); !errors.Is(err, os.ErrDeadlineExceeded) || d > time.Second {
		t.Fatalf("earlier deadline: %v after %s", err, d)
	}
	// A small push later is not re-armed (at most 1/64 of the deadline's
	// length); a large one is.
	base := time.Now().Add(10 * time.Second)
	_ = dc.SetReadDeadline(base)
	_ = dc.SetReadDeadline(base.Add(50 * time.Millisecond))
	if !dc.readDL.at.Equal(base) {
		t.Fatalf("a 50ms push of a 10s deadline was re-armed")
	}
	_ = dc.SetReadDeadline(base.Add(time.Second))
	if !dc.readDL.at.Equal(base.Add(time.Second)) {
		t.Fatalf("a 1s push of a 10s deadline was not re-armed")
	}
	// Clearing takes effect: the read waits for the peer.
	_ = dc.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
	_ = dc.SetReadDeadline(time.Time{})
	go func() {
		time.Sleep(100 * time.Millisecond)
		_, _ = p.conn.Write([]byte("late"))
	}()
	if d, err := read(); err != nil || d < 80*time.Millisecond {
		t.Fatalf("cleared deadline: %v after %s", err, d)
	}
	// SetDeadline covers writes too.
	_ = dc.SetDeadline(time.Now().Add(time.Minute))
	if dc.writeDL.at.IsZero() {
		t.Fatal("SetDeadline did not set the write deadline")
	}
}

// A connection closed right after a held answer (a client that asked for
// Connection: close) still delivers the whole answer, even when the peer
// is slow to read and the answer is larger than the socket buffers.
func TestDeferredConnCloseDeliversLargeHeldAnswer(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan *net.TCPConn, 1)
	go func() {
		c, err := ln.Accept()
		if err == nil {
			tc := c.(*net.TCPConn)
			_ = tc.SetReadBuffer(4096)
			accepted <- tc
		}
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	_ = c.(*net.TCPConn).SetWriteBuffer(4096)
	dc := NewDeferredConn(c, false).(*DeferredConn)
	peer := <-accepted
	defer peer.Close()
	dc.Begin()
	dc.End(true)
	answer := bytes.Repeat([]byte("0123456789abcdef"), (maxDeferred-16)/16)
	if _, err := dc.Write(answer); err != nil {
		t.Fatal(err)
	}
	closed := make(chan error, 1)
	go func() { closed <- dc.Close() }()
	time.Sleep(50 * time.Millisecond) // the peer reads only now
	_ = peer.SetReadDeadline(time.Now().Add(5 * time.Second))
	got, err := io.ReadAll(peer)
	if err != nil || !bytes.Equal(got, answer) {
		t.Fatalf("peer got %d of %d bytes, err %v", len(got), len(answer), err)
	}
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
}
