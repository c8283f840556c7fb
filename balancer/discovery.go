package balancer

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"slices"
	"sort"
	"strings"
	"time"
)

// Discoverer finds the addresses behind a node entry's host name.
type Discoverer interface {
	// Discover returns the host's addresses. No address (the name does not
	// exist or has no record) is an empty answer, not an error; an error
	// means the answer is unknown, and the nodes found before stay.
	Discover(ctx context.Context, host string) ([]netip.Addr, error)
}

// DNSDiscoverer resolves A and AAAA records, as a Kubernetes headless
// Service publishes one per ready pod.
type DNSDiscoverer struct {
	Resolver *net.Resolver
}

var _ Discoverer = (*DNSDiscoverer)(nil)

// NewDNSDiscoverer asks server ("host:port", over UDP and TCP) or, when
// server is empty, the system's resolver.
func NewDNSDiscoverer(server string) *DNSDiscoverer {
	if server == "" {
		return &DNSDiscoverer{Resolver: net.DefaultResolver}
	}
	var d net.Dialer
	return &DNSDiscoverer{Resolver: &net.Resolver{PreferGo: true,
		Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return d.DialContext(ctx, network, server)
		}}}
}

// Discover implements Discoverer.
func (d *DNSDiscoverer) Discover(ctx context.Context, host string) ([]netip.Addr, error) {
	if a, err := netip.ParseAddr(host); err == nil {
		return []netip.Addr{a.Unmap()}, nil
	}
	addrs, err := d.Resolver.LookupNetIP(ctx, "ip", host)
	if err != nil {
		var de *net.DNSError
		if errors.As(err, &de) && de.IsNotFound {
			return nil, nil
		}
		return nil, fmt.Errorf("resolve %s: %w", host, err)
	}
	for i := range addrs {
		addrs[i] = addrs[i].Unmap()
	}
	return addrs, nil
}

// discoveryError is the last failure of an entry's discovery.
type discoveryError struct {
	msg    string
	since  time.Time
	logged time.Time
	count  uint64
}

// DiscoveryStatus is one discover entry as /status shows it.
type DiscoveryStatus struct {
	Entry  string   `json:"entry"`
	Host   string   `json:"host"`
	Addrs  []string `json:"addrs"`
	Error  string   `json:"error,omitempty"` // the last lookup failed; the addresses are the last known
	Errors uint64   `json:"errors"`          // failed lookups in a row
}

// Discovery returns the state of every discover entry.
func (p *Pool) Discovery() []DiscoveryStatus {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []DiscoveryStatus
	for _, e := range p.entries {
		if e.Discover == "" {
			continue
		}
		ds := DiscoveryStatus{Entry: e.Name, Host: hostOf(e.URL), Addrs: []string{}}
		for _, a := range p.found[e.Name] {
			ds.Addrs = append(ds.Addrs, a.String())
		}
		if de, ok := p.discErr[e.Name]; ok {
			ds.Error, ds.Errors = de.msg, de.count
		}
		out = append(out, ds)
	}
	return out
}

func hostOf(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return ""
	}
	return u.Hostname()
}

// expand makes one node per address of a discover entry: named
// <entry>-<address>, its URLs pointing at the address, with the entry's
// settings.
func expand(e NodeConfig, addrs []netip.Addr) []NodeConfig {
	host := hostOf(e.URL)
	out := make([]NodeConfig, 0, len(addrs))
	for _, a := range addrs {
		nc := e
		nc.Discover, nc.DiscoverInterval = "", 0
		nc.Name = e.Name + "-" + a.String()
		nc.Models = slices.Clone(e.Models)
		nc.URL = swapHost(e.URL, host, a)
		if nc.MetricsURL != "" {
			nc.MetricsURL = swapHost(nc.MetricsURL, host, a)
		}
		if nc.HealthURL != "" {
			nc.HealthURL = swapHost(nc.HealthURL, host, a)
		}
		out = append(out, nc)
	}
	return out
}

// swapHost replaces host by addr in raw, keeping the port.
func swapHost(raw, host string, addr netip.Addr) string {
	u, err := url.Parse(raw)
	if err != nil || u.Hostname() != host {
		return raw
	}
	ip := addr.String()
	if port := u.Port(); port != "" {
		u.Host = net.JoinHostPort(ip, port)
	} else if addr.Is6() {
		u.Host = "[" + ip + "]"
	} else {
		u.Host = ip
	}
	return u.String()
}

// discoveryKey names an entry's discovery loop; a change of host or
// interval restarts it.
func discoveryKey(e NodeConfig) string {
	return "discover\x00" + e.Name + "\x00" + e.URL + "\x00" + e.DiscoverInterval.String()
}

// reconcileDiscoveryLocked starts a loop per discover entry and stops the
// loops of entries that are gone or changed.
func (p *Pool) reconcileDiscoveryLocked() {
	want := map[string]NodeConfig{}
	for _, e := range p.entries {
		if e.Discover != "" {
			want[discoveryKey(e)] = e
		}
	}
	for k, cancel := range p.loops {
		if s, ok := k.(string); ok {
			if _, keep := want[s]; !keep {
				cancel()
				delete(p.loops, k)
			}
		}
	}
	if !p.runningLocked() {
		return
	}
	for k, e := range want {
		if p.loops[k] != nil {
			continue
		}
		ctx, cancel := context.WithCancel(p.runCtx)
		p.loops[k] = cancel
		p.wg.Go(func() {
			every(ctx, func() time.Duration { return e.DiscoverInterval.D() }, func() { p.discover(ctx, e) })
		})
	}
}

// discover resolves one entry and applies the answer if it changed.
func (p *Pool) discover(ctx context.Context, e NodeConfig) {
	lctx, cancel := context.WithTimeout(ctx, min(e.DiscoverInterval.D(), 5*time.Second))
	addrs, err := p.st.Load().disc.Discover(lctx, hostOf(e.URL))
	cancel()
	p.mu.Lock()
	defer p.mu.Unlock()
	if ctx.Err() != nil {
		return // the entry changed or the pool stopped meanwhile
	}
	if err != nil {
		de := p.discErr[e.Name]
		if de.msg != err.Error() {
			de.msg, de.since, de.logged = err.Error(), p.now(), time.Time{}
		}
		de.count++
		if p.now().Sub(de.logged) >= time.Minute {
			de.logged = p.now()
			p.log.Warn("discovery: lookup failed; keeping the nodes found before", "entry", e.Name,
				"nodes", len(p.found[e.Name]), "failures", de.count, "error", de.msg)
		}
		p.discErr[e.Name] = de
		if c := p.discoveryCounterLocked(e.Name); c != nil {
			c.Inc()
		}
		return
	}
	if de, ok := p.discErr[e.Name]; ok {
		p.log.Info("discovery: lookups work again", "entry", e.Name, "failures", de.count)
		delete(p.discErr, e.Name)
	}
	addrs = slices.Clone(addrs)
	sort.Slice(addrs, func(i, j int) bool { return addrs[i].Less(addrs[j]) })
	addrs = slices.Compact(addrs)
	old, known := p.found[e.Name]
	if known && slices.Equal(old, addrs) {
		return
	}
	p.found[e.Name] = addrs
	p.rebuildLocked()
	var added, removed []string
	for _, a := range addrs {
		if !slices.Contains(old, a) {
			added = append(added, a.String())
		}
	}
	for _, a := range old {
		if !slices.Contains(addrs, a) {
			removed = append(removed, a.String())
		}
	}
	p.log.Info("discovery: nodes changed", "entry", e.Name, "nodes", len(addrs),
		"added", strings.Join(added, ","), "removed", strings.Join(removed, ","))
}

// registerDiscoveryLocked exposes, per discover entry:
//
//	frontdoor_discovery_nodes{entry}         nodes found by the last good lookup
//	frontdoor_discovery_errors_total{entry}  failed lookups
func (p *Pool) registerDiscoveryLocked() {
	if p.mset == nil {
		return
	}
	for _, e := range p.entries {
		if e.Discover == "" {
			continue
		}
		name := e.Name
		p.mset.GetOrCreateGauge(`frontdoor_discovery_nodes{entry="`+escapeLabel(name)+`"}`, func() float64 {
			p.mu.Lock()
			defer p.mu.Unlock()
			return float64(len(p.found[name]))
		})
		p.discoveryCounterLocked(name)
	}
}

func (p *Pool) discoveryCounterLocked(entry string) interface{ Inc() } {
	if p.mset == nil {
		return nil
	}
	return p.mset.GetOrCreateCounter(`frontdoor_discovery_errors_total{entry="` + escapeLabel(entry) + `"}`)
}
