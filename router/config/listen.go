package config

import (
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"strconv"
	"strings"

	"frontdoor/internal/redact"
)

// checkListen reports whether addr is a host:port net.Listen takes.
func checkListen(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		if _, perr := strconv.Atoi(addr); perr == nil {
			return fmt.Errorf("%q has no host part: write %q to listen on every interface", addr, ":"+addr)
		}
		return fmt.Errorf("%q is not host:port: %w", addr, err)
	}
	if p, err := strconv.Atoi(port); err != nil || p < 0 || p > 65535 {
		return fmt.Errorf("%q: port %q is not a number from 0 to 65535", addr, port)
	}
	if strings.ContainsAny(host, " /") {
		return fmt.Errorf("%q: %q is not a host", addr, host)
	}
	return nil
}

// ListenAddrPorts turns a listen address into the addresses it binds, as
// far as they are known without resolving: ":8080" is every address
// (unspecified), "localhost:8080" the loopback ones. Port 0 and other host
// names give none (the bound listener's address covers them).
func ListenAddrPorts(listen string) []netip.AddrPort {
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		return nil
	}
	p, err := strconv.ParseUint(port, 10, 16)
	if err != nil || p == 0 {
		return nil
	}
	var addrs []netip.Addr
	switch host {
	case "":
		addrs = []netip.Addr{netip.IPv4Unspecified(), netip.IPv6Unspecified()}
	case "localhost":
		addrs = []netip.Addr{netip.MustParseAddr("127.0.0.1"), netip.IPv6Loopback()}
	default:
		if a, err := netip.ParseAddr(host); err == nil {
			addrs = []netip.Addr{a.Unmap()}
		}
	}
	out := make([]netip.AddrPort, 0, len(addrs))
	for _, a := range addrs {
		out = append(out, netip.AddrPortFrom(a, uint16(p)))
	}
	return out
}

// selfNodeProblems refuses a static node whose URL is the gateway's own
// listen address: loopback (or localhost) and listen's port when the
// gateway listens on every address or on loopback, or listen's very
// address. Every request would come back to the gateway. (A discovered
// address that is the gateway is dropped at run time.)
func (c *Config) selfNodeProblems() []string {
	self := append(ListenAddrPorts(c.Listen), ListenAddrPorts(c.Admin.Listen)...)
	if len(self) == 0 {
		return nil
	}
	var out []string
	for i, n := range c.Nodes {
		if n.Discover != "" {
			continue
		}
		u, err := url.Parse(n.URL)
		if err != nil || u.Host == "" {
			continue // reported by the node's own checks
		}
		port := u.Port()
		if port == "" {
			port = map[string]string{"http": "80", "https": "443"}[u.Scheme]
		}
		p, err := strconv.ParseUint(port, 10, 16)
		if err != nil {
			continue
		}
		var addrs []netip.Addr
		if u.Hostname() == "localhost" {
			addrs = []netip.Addr{netip.MustParseAddr("127.0.0.1"), netip.IPv6Loopback()}
		} else if a, err := netip.ParseAddr(u.Hostname()); err == nil {
			addrs = []netip.Addr{a.Unmap()}
		}
		for _, a := range addrs {
			if isSelf(self, netip.AddrPortFrom(a, uint16(p))) {
				out = append(out, fmt.Sprintf("nodes[%d].url: %q is this gateway's own address (listen: %q, admin.listen: %q): every request would come back to it",
					i, redact.URL(n.URL), c.Listen, c.Admin.Listen))
				break
			}
		}
	}
	return out
}

// isSelf reports whether ap is one of self, an unspecified address in self
// standing for every loopback address (the only ones known to be local
// without asking the interfaces).
func isSelf(self []netip.AddrPort, ap netip.AddrPort) bool {
	for _, s := range self {
		if s.Port() != ap.Port() {
			continue
		}
		if s.Addr() == ap.Addr() || s.Addr().IsUnspecified() && (ap.Addr().IsLoopback() || ap.Addr().IsUnspecified()) {
			return true
		}
	}
	return false
}
