//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package gpusim

import (
	"net"
	"syscall"
)

// connAlive reports whether the client end of c is still open, by peeking
// (MSG_PEEK|MSG_DONTWAIT) at the socket without consuming any bytes: a
// zero-byte read means the peer closed it. Safe while no other goroutine
// reads c, which holds while a fasthttp handler or its body stream writer
// runs.
func connAlive(c net.Conn) bool {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return true // cannot tell; rely on write errors
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	alive := true
	err = rc.Read(func(fd uintptr) bool {
		var buf [1]byte
		n, _, rerr := syscall.Recvfrom(int(fd), buf[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		switch {
		case rerr == syscall.EAGAIN || rerr == syscall.EWOULDBLOCK || rerr == syscall.EINTR:
		case rerr != nil || n == 0:
			alive = false
		}
		return true
	})
	return err == nil && alive
}
