// Command epollrelay is the cheapest proxy that makes one system call per
// socket operation: a single-threaded epoll loop that copies bytes between
// each client connection and an upstream connection of its own, parsing
// nothing (two reads and two writes per exchange). The overhead benchmark
// measures it beside frontdoor, whose loops batch those calls through
// io_uring and so can cost less.
//
//	go run ./bench/epollrelay -listen 127.0.0.1:9300 -upstream 127.0.0.1:9301
package main

import (
	"flag"
	"fmt"
	"net"
	"os"
	"runtime"

	"golang.org/x/sys/unix"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:9300", "address to listen on")
	upstream := flag.String("upstream", "127.0.0.1:9301", "address to relay to")
	flag.Parse()
	ep, lfd, usa, err := setup(*listen, *upstream)
	if err != nil {
		fmt.Fprintln(os.Stderr, "epollrelay:", err)
		os.Exit(1)
	}
	relay(ep, lfd, usa)
}

func sockaddr(addr string) (*unix.SockaddrInet4, error) {
	a, err := net.ResolveTCPAddr("tcp4", addr)
	if err != nil {
		return nil, err
	}
	sa := &unix.SockaddrInet4{Port: a.Port}
	copy(sa.Addr[:], a.IP.To4())
	return sa, nil
}

// setup listens and makes the epoll set.
func setup(listen, upstream string) (ep, lfd int, usa *unix.SockaddrInet4, err error) {
	lsa, err := sockaddr(listen)
	if err != nil {
		return 0, 0, nil, err
	}
	if usa, err = sockaddr(upstream); err != nil {
		return 0, 0, nil, err
	}
	if lfd, err = unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_NONBLOCK, 0); err != nil {
		return 0, 0, nil, err
	}
	_ = unix.SetsockoptInt(lfd, unix.SOL_SOCKET, unix.SO_REUSEADDR, 1)
	if err := unix.Bind(lfd, lsa); err != nil {
		return 0, 0, nil, err
	}
	if err := unix.Listen(lfd, 1024); err != nil {
		return 0, 0, nil, err
	}
	if ep, err = unix.EpollCreate1(0); err != nil {
		return 0, 0, nil, err
	}
	if err := watch(ep, lfd); err != nil {
		return 0, 0, nil, err
	}
	return ep, lfd, usa, nil
}

func watch(ep, fd int) error {
	return unix.EpollCtl(ep, unix.EPOLL_CTL_ADD, fd, &unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(fd)})
}

// relay copies bytes between client and upstream connections, forever.
func relay(ep, lfd int, usa *unix.SockaddrInet4) {
	runtime.LockOSThread()
	peer := map[int]int{}
	events := make([]unix.EpollEvent, 128)
	buf := make([]byte, 64<<10)
	for {
		n, err := unix.EpollWait(ep, events, -1)
		if err != nil {
			continue // EINTR
		}
		for _, ev := range events[:n] {
			fd := int(ev.Fd)
			if fd == lfd {
				for {
					cfd, _, err := unix.Accept4(lfd, unix.SOCK_NONBLOCK)
					if err != nil {
						break
					}
					ufd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM, 0)
					if err != nil || unix.Connect(ufd, usa) != nil {
						unix.Close(cfd)
						if err == nil {
							unix.Close(ufd)
						}
						continue
					}
					_ = unix.SetNonblock(ufd, true)
					for _, s := range []int{cfd, ufd} {
						_ = unix.SetsockoptInt(s, unix.IPPROTO_TCP, unix.TCP_NODELAY, 1)
						_ = watch(ep, s)
					}
					peer[cfd], peer[ufd] = ufd, cfd
				}
				continue
			}
			other, ok := peer[fd]
			if !ok {
				continue
			}
			m, err := unix.Read(fd, buf)
			if err == unix.EAGAIN {
				continue
			}
			if m <= 0 {
				unix.Close(fd)
				unix.Close(other)
				delete(peer, fd)
				delete(peer, other)
				continue
			}
			for b := buf[:m]; len(b) > 0; {
				w, err := unix.Write(other, b)
				if err == unix.EAGAIN {
					continue // a benchmark's answers fit the socket buffer; spin otherwise
				}
				if err != nil {
					break
				}
				b = b[w:]
			}
		}
	}
}
