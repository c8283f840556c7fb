package balancer

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"net/url"
	"slices"
	"sort"
	"strconv"
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
	Entry    string   `json:"entry"`
	Host     string   `json:"host"`
	Addrs    []string `json:"addrs"`
	MaxNodes int      `json:"max_nodes"`       // discover_max_nodes
	Error    string   `json:"error,omitempty"` // the last lookup failed; the addresses are the last known
	Errors   uint64   `json:"errors"`          // failed lookups in a row
	// Dropped counts, by reason, the addresses of the last good lookup
	// that were not made nodes; DroppedAddrs lists the first of them.
	Dropped      map[string]int `json:"dropped,omitempty"`
	DroppedAddrs []DroppedAddr  `json:"dropped_addrs,omitempty"`
}

// DroppedAddr is an address discovery did not make a node of, and why.
type DroppedAddr struct {
	Addr   string `json:"addr"`
	Reason string `json:"reason"`
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
		ds := DiscoveryStatus{Entry: e.Name, Host: hostOf(e.URL), Addrs: []string{}, MaxNodes: maxNodes(e)}
		for _, a := range p.found[e.Name] {
			ds.Addrs = append(ds.Addrs, a.String())
		}
		if de, ok := p.discErr[e.Name]; ok {
			ds.Error, ds.Errors = de.msg, de.count
		}
		if dr := p.drops[e.Name]; dr != nil && len(dr.counts) > 0 {
			ds.Dropped, ds.DroppedAddrs = maps.Clone(dr.counts), slices.Clone(dr.sample)
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
		nc.Discover, nc.DiscoverInterval, nc.DiscoverAllow, nc.DiscoverMaxNodes = "", 0, nil, 0
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

// discoveryKey names an entry's discovery loop; a change of host,
// interval or filter restarts it.
func discoveryKey(e NodeConfig) string {
	return "discover\x00" + e.Name + "\x00" + e.URL + "\x00" + e.DiscoverInterval.String() +
		"\x00" + strings.Join(e.DiscoverAllow, ",") + "\x00" + strconv.Itoa(e.DiscoverMaxNodes)
}

// Reasons an address found by discovery is not made a node, the reason
// label of frontdoor_discovery_dropped_total.
const (
	dropUnspecified = "unspecified" // 0.0.0.0, ::
	dropMulticast   = "multicast"
	dropSelf        = "self"         // the gateway's own listen address and the node's port
	dropMetadata    = "metadata"     // a cloud provider's metadata service
	dropLoopback    = AllowLoopback  // unless discover_allow: [loopback]
	dropLinkLocal   = AllowLinkLocal // unless discover_allow: [link_local]
	dropOverCap     = "over_cap"     // past discover_max_nodes
)

// dropReasons lists every reason, in the order they are checked.
var dropReasons = [...]string{dropUnspecified, dropMulticast, dropSelf, dropMetadata, dropLoopback, dropLinkLocal, dropOverCap}

// metadataAddrs are cloud metadata and platform services a node never is:
// AWS, GCP, Azure and OCI (169.254.169.254, fd00:ec2::254), AWS ECS task
// credentials (169.254.170.2), Azure's wire server (168.63.129.16) and
// Alibaba Cloud (100.100.100.200).
var metadataAddrs = []netip.Addr{
	netip.MustParseAddr("169.254.169.254"), netip.MustParseAddr("169.254.170.2"),
	netip.MustParseAddr("fd00:ec2::254"), netip.MustParseAddr("168.63.129.16"),
	netip.MustParseAddr("100.100.100.200"),
}

// maxDroppedShown bounds DiscoveryStatus.DroppedAddrs.
const maxDroppedShown = 16

// dropState is what an entry's last good lookup dropped (under Pool.mu).
type dropState struct {
	counts map[string]int // by reason
	sample []DroppedAddr  // the first maxDroppedShown
	logged time.Time      // when the last WARN line was written
	inLog  bool           // the drops were logged: log when they stop
}

func maxNodes(e NodeConfig) int {
	if e.DiscoverMaxNodes > 0 {
		return e.DiscoverMaxNodes
	}
	return DefaultDiscoverMaxNodes
}

// urlPort is the port requests to raw go to: its own or the scheme's.
func urlPort(raw string) uint16 {
	u, err := url.Parse(raw)
	if err != nil {
		return 0
	}
	if p, err := strconv.ParseUint(u.Port(), 10, 16); err == nil {
		return uint16(p)
	}
	if u.Scheme == "https" {
		return 443
	}
	return 80
}

// selfMatcher reports whether an address with port is the gateway itself:
// one of self, or any address of this host (a loopback one or one of its
// interfaces') when the gateway listens on an unspecified address.
func selfMatcher(self []netip.AddrPort, port uint16) func(netip.Addr) bool {
	var exact []netip.Addr
	everyLocal := false
	for _, s := range self {
		if s.Port() != port {
			continue
		}
		if a := s.Addr().Unmap(); a.IsUnspecified() {
			everyLocal = true
		} else {
			exact = append(exact, a)
		}
	}
	var local []netip.Addr
	if everyLocal {
		local = interfaceAddrs()
	}
	return func(a netip.Addr) bool {
		return slices.Contains(exact, a) || everyLocal && (a.IsLoopback() || slices.Contains(local, a))
	}
}

// interfaceAddrs returns the addresses of this host's interfaces.
func interfaceAddrs() []netip.Addr {
	ifas, err := net.InterfaceAddrs()
	if err != nil {
		return nil
	}
	var out []netip.Addr
	for _, ia := range ifas {
		if pfx, err := netip.ParsePrefix(ia.String()); err == nil {
			out = append(out, pfx.Addr().Unmap().WithZone(""))
		}
	}
	return out
}

// filterAddrs keeps the addresses of sorted that may become e's nodes: not
// unspecified, multicast, the gateway itself (isSelf, may be nil) or a
// metadata service; loopback and link-local only if discover_allow says
// so; and at most discover_max_nodes of what remains, the first in order.
func filterAddrs(e NodeConfig, sorted []netip.Addr, isSelf func(netip.Addr) bool) (keep []netip.Addr, dropped []DroppedAddr) {
	allow := func(class string) bool { return slices.Contains(e.DiscoverAllow, class) }
	limit := maxNodes(e)
	for _, a := range sorted {
		reason := ""
		switch {
		case a.IsUnspecified():
			reason = dropUnspecified
		case a.IsMulticast():
			reason = dropMulticast
		case isSelf != nil && isSelf(a):
			reason = dropSelf
		case slices.Contains(metadataAddrs, a):
			reason = dropMetadata
		case a.IsLoopback() && !allow(AllowLoopback):
			reason = dropLoopback
		case a.IsLinkLocalUnicast() && !allow(AllowLinkLocal):
			reason = dropLinkLocal
		case len(keep) >= limit:
			reason = dropOverCap
		}
		if reason != "" {
			dropped = append(dropped, DroppedAddr{Addr: a.String(), Reason: reason})
			continue
		}
		keep = append(keep, a)
	}
	return keep, dropped
}

// noteDropsLocked records what a lookup of e dropped: the counter, the
// state /status shows, and a WARN line at most once a minute per entry
// that names the DNS name, the reasons and the key that changes them.
func (p *Pool) noteDropsLocked(e NodeConfig, kept int, dropped []DroppedAddr) {
	dr := p.drops[e.Name]
	if dr == nil {
		dr = &dropState{}
		p.drops[e.Name] = dr
	}
	dr.counts, dr.sample = nil, nil
	if len(dropped) == 0 {
		if dr.inLog {
			dr.inLog = false
			p.log.Info("discovery: no address dropped any more", "entry", e.Name, "host", hostOf(e.URL), "nodes", kept)
		}
		return
	}
	dr.counts = map[string]int{}
	for _, d := range dropped {
		dr.counts[d.Reason]++
	}
	// Shown: the rare reasons first, then over_cap.
	for _, d := range dropped {
		if d.Reason != dropOverCap && len(dr.sample) < maxDroppedShown {
			dr.sample = append(dr.sample, d)
		}
	}
	for _, d := range dropped {
		if d.Reason == dropOverCap && len(dr.sample) < maxDroppedShown {
			dr.sample = append(dr.sample, d)
		}
	}
	var summary, hints []string
	for _, r := range dropReasons {
		n := dr.counts[r]
		if n == 0 {
			continue
		}
		if c := p.droppedCounterLocked(e.Name, r); c != nil {
			c.Add(n)
		}
		summary = append(summary, r+"="+strconv.Itoa(n))
	}
	if now := p.now(); now.Sub(dr.logged) >= time.Minute {
		dr.logged, dr.inLog = now, true
		var examples []string
		for _, d := range dr.sample[:min(len(dr.sample), 4)] {
			examples = append(examples, d.Addr+" ("+d.Reason+")")
		}
		var classes []string
		for _, c := range []string{AllowLoopback, AllowLinkLocal} {
			if dr.counts[c] > 0 {
				classes = append(classes, c)
			}
		}
		if len(classes) > 0 {
			hints = append(hints, "if the nodes really are there (loopback: on this host, as in a local test), set discover_allow: ["+
				strings.Join(classes, ", ")+"] on the nodes[] entry "+strconv.Quote(e.Name))
		}
		if dr.counts[dropOverCap] > 0 {
			hints = append(hints, "the name has more records than discover_max_nodes ("+strconv.Itoa(maxNodes(e))+"); the first in address order are kept")
		}
		if dr.counts[dropSelf] > 0 {
			hints = append(hints, "the name resolves to this gateway's own listen address and the node's port: requests would loop")
		}
		args := []any{"entry", e.Name, "host", hostOf(e.URL), "nodes", kept, "dropped", strings.Join(summary, ","),
			"examples", strings.Join(examples, ", ")}
		if len(hints) > 0 {
			args = append(args, "hint", strings.Join(hints, "; "))
		}
		p.log.Warn("discovery: addresses dropped, not made nodes", args...)
	}
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
	var isSelf func(netip.Addr) bool
	if p.self != nil && err == nil {
		isSelf = selfMatcher(p.self(), urlPort(e.URL))
	}
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
	addrs, dropped := filterAddrs(e, slices.Compact(addrs), isSelf)
	p.noteDropsLocked(e, len(addrs), dropped)
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
//	frontdoor_discovery_nodes{entry}                  nodes found by the last good lookup
//	frontdoor_discovery_errors_total{entry}           failed lookups
//	frontdoor_discovery_dropped_total{entry,reason}   addresses not made nodes, counted at every lookup
func (p *Pool) registerDiscoveryLocked() {
	if p.mset == nil {
		return
	}
	for _, e := range p.entries {
		if e.Discover == "" {
			continue
		}
		name := e.Name
		discoveryNodesFamily.GetOrCreateGauge(p.mset, func() float64 {
			p.mu.Lock()
			defer p.mu.Unlock()
			return float64(len(p.found[name]))
		}, "entry", name)
		p.discoveryCounterLocked(name)
		for _, r := range dropReasons {
			p.droppedCounterLocked(name, r)
		}
	}
}

func (p *Pool) droppedCounterLocked(entry, reason string) interface{ Add(int) } {
	if p.mset == nil {
		return nil
	}
	return discoveryDroppedFamily.GetOrCreateCounter(p.mset, "entry", entry, "reason", reason)
}

func (p *Pool) discoveryCounterLocked(entry string) interface{ Inc() } {
	if p.mset == nil {
		return nil
	}
	return discoveryErrorsFamily.GetOrCreateCounter(p.mset, "entry", entry)
}
