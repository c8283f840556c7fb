package adapters

import (
	"bytes"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// A batch's operations behave as the system calls they stand for: data
// moves, an empty socket says EAGAIN instead of waiting, a closed peer
// reads as 0, and a bad descriptor fails alone without stopping the
// operations after it.
func TestIOBatchActsLikeSystemCalls(t *testing.T) {
	b, err := newIOBatch()
	if err != nil {
		t.Skipf("no io_uring here (%v): the loops make plain system calls", err)
	}
	defer b.close()
	pair := func() [2]int {
		fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_NONBLOCK, 0)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { unix.Close(fds[0]); unix.Close(fds[1]) })
		return fds
	}
	p1, p2 := pair(), pair()

	s1 := b.send(p1[0], []byte("hello"))
	bad := b.send(-1, []byte("x"))
	s2 := b.send(p2[0], []byte("world!"))
	b.run()
	if b.res[s1] != 5 || b.res[s2] != 6 || syscall.Errno(-b.res[bad]) != unix.EBADF {
		t.Fatalf("sends: %d %d, bad fd %d", b.res[s1], b.res[s2], b.res[bad])
	}

	buf1, buf2, empty := make([]byte, 64), make([]byte, 64), make([]byte, 64)
	r1 := b.recv(p1[1], buf1)
	r2 := b.recv(p2[1], buf2)
	r3 := b.recv(p1[0], empty) // nothing was sent this way
	b.run()
	if b.res[r1] != 5 || !bytes.Equal(buf1[:5], []byte("hello")) || b.res[r2] != 6 || !bytes.Equal(buf2[:6], []byte("world!")) {
		t.Fatalf("recvs: %d %q, %d %q", b.res[r1], buf1[:max(0, b.res[r1])], b.res[r2], buf2[:max(0, b.res[r2])])
	}
	if n, err := readResult(b.res[r3]); n != 0 || err != unix.EAGAIN {
		t.Fatalf("recv on an empty socket: %d %v, want EAGAIN", n, err)
	}

	unix.Close(p1[1])
	r4 := b.recv(p1[0], empty)
	b.run()
	if _, err := readResult(b.res[r4]); err != errEOF {
		t.Fatalf("recv after the peer closed: %v, want EOF", err)
	}

	// More rounds than the ring holds: results never mix between rounds.
	for round := range 3 * batchEntries / 2 {
		msg := []byte{byte(round)}
		i := b.send(p2[0], msg)
		j := b.recv(p2[1], buf2)
		b.run()
		if b.res[i] != 1 || b.res[j] != 1 || buf2[0] != byte(round) {
			t.Fatalf("round %d: send %d recv %d byte %d", round, b.res[i], b.res[j], buf2[0])
		}
	}
}
