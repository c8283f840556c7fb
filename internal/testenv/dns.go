package testenv

import (
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"

	"github.com/miekg/dns"
)

// DNSServer is an authoritative DNS server on a loopback port, over UDP
// and TCP (a UDP answer too large for the client's buffer is truncated, and
// the client asks again over TCP, as with a real server), whose A/AAAA
// records a test changes as it goes.
type DNSServer struct {
	srvs    []*dns.Server
	addr    string
	mu      sync.Mutex
	records map[string][]netip.Addr // fqdn, lower case
	failing bool
	queries int
}

// StartDNS starts a DNS server; it stops at the end of the test.
func StartDNS(t testing.TB) *DNSServer {
	t.Helper()
	var pc net.PacketConn
	var ln net.Listener
	for i := 0; ln == nil; i++ {
		var err error
		if pc, err = net.ListenPacket("udp", "127.0.0.1:0"); err != nil {
			t.Fatalf("dns listen: %v", err)
		}
		if ln, err = net.Listen("tcp", pc.LocalAddr().String()); err != nil {
			_ = pc.Close() // the port is taken over TCP: another one
			if i == 10 {
				t.Fatalf("dns listen tcp: %v", err)
			}
		}
	}
	d := &DNSServer{addr: pc.LocalAddr().String(), records: map[string][]netip.Addr{}}
	for _, srv := range []*dns.Server{{PacketConn: pc}, {Listener: ln}} {
		started := make(chan struct{})
		srv.Handler, srv.NotifyStartedFunc = dns.HandlerFunc(d.serve), func() { close(started) }
		go func() { _ = srv.ActivateAndServe() }()
		<-started
		d.srvs = append(d.srvs, srv)
	}
	t.Cleanup(func() {
		for _, srv := range d.srvs {
			_ = srv.Shutdown()
		}
	})
	return d
}

// Addr is the server's "127.0.0.1:port".
func (d *DNSServer) Addr() string { return d.addr }

// Set replaces name's records (none: the name stops existing).
func (d *DNSServer) Set(name string, addrs ...string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	key := dns.Fqdn(strings.ToLower(name))
	if len(addrs) == 0 {
		delete(d.records, key)
		return
	}
	var as []netip.Addr
	for _, a := range addrs {
		as = append(as, netip.MustParseAddr(a))
	}
	d.records[key] = as
}

// SetFailing makes every answer SERVFAIL (true) or normal again.
func (d *DNSServer) SetFailing(f bool) {
	d.mu.Lock()
	d.failing = f
	d.mu.Unlock()
}

// Queries returns how many queries were answered.
func (d *DNSServer) Queries() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.queries
}

func (d *DNSServer) serve(w dns.ResponseWriter, r *dns.Msg) {
	m := new(dns.Msg)
	m.SetReply(r)
	m.Authoritative = true
	d.mu.Lock()
	d.queries++
	failing := d.failing
	var addrs []netip.Addr
	known := false
	if len(r.Question) == 1 {
		addrs, known = d.records[strings.ToLower(r.Question[0].Name)]
	}
	d.mu.Unlock()
	switch {
	case failing:
		m.Rcode = dns.RcodeServerFailure
	case !known:
		m.Rcode = dns.RcodeNameError
	default:
		q := r.Question[0]
		hdr := dns.RR_Header{Name: q.Name, Class: dns.ClassINET, Ttl: 1}
		for _, a := range addrs {
			switch {
			case q.Qtype == dns.TypeA && a.Is4():
				hdr.Rrtype = dns.TypeA
				m.Answer = append(m.Answer, &dns.A{Hdr: hdr, A: a.AsSlice()})
			case q.Qtype == dns.TypeAAAA && a.Is6():
				hdr.Rrtype = dns.TypeAAAA
				m.Answer = append(m.Answer, &dns.AAAA{Hdr: hdr, AAAA: a.AsSlice()})
			}
		}
	}
	if _, udp := w.LocalAddr().(*net.UDPAddr); udp {
		size := dns.MinMsgSize
		if o := r.IsEdns0(); o != nil {
			size = int(o.UDPSize())
		}
		m.Truncate(size) // sets TC when it cuts: the client retries over TCP
	}
	_ = w.WriteMsg(m)
}
