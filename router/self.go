package router

import (
	"net"
	"net/netip"
	"sync"

	"frontdoor/router/config"
)

// selfAddrs are the addresses the gateway serves on, so that discovery
// never makes a node of the gateway itself. Every listener Serve runs is
// added while it serves; a second listener (an admin one) joins with add.
type selfAddrs struct {
	mu    sync.Mutex
	bound map[*netip.AddrPort]struct{}
}

// add records ln's address until the returned func is called.
func (s *selfAddrs) add(ln net.Listener) (remove func()) {
	ta, ok := ln.Addr().(*net.TCPAddr)
	if !ok {
		return func() {}
	}
	ap := ta.AddrPort()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.bound == nil {
		s.bound = map[*netip.AddrPort]struct{}{}
	}
	s.bound[&ap] = struct{}{}
	return func() {
		s.mu.Lock()
		delete(s.bound, &ap)
		s.mu.Unlock()
	}
}

// list returns listen: as configured (when its port is set) and the
// address of every listener serving now; the balancer reads it at every
// discovery lookup.
func (s *selfAddrs) list(listen string) []netip.AddrPort {
	out := config.ListenAddrPorts(listen)
	s.mu.Lock()
	for ap := range s.bound {
		out = append(out, *ap)
	}
	s.mu.Unlock()
	return out
}
