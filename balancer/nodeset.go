package balancer

import (
	"fmt"
	"reflect"
	"time"

	"frontdoor/internal/redact"
)

// Update replaces the balancer settings, the node entries and the aliases
// in place. Nodes whose entry is unchanged keep their state; a changed
// entry gives a new node (keeping health, drain and latency averages) and
// the old one drains, so requests in flight finish on the settings they
// started with. Nothing changes if the new configuration is invalid.
func (p *Pool) Update(cfg Config, nodes []NodeConfig, aliases []ModelAlias) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	entries := make([]NodeConfig, 0, len(nodes))
	seen := map[string]bool{}
	for i := range nodes {
		nc := nodes[i]
		DefaultNode(&nc)
		if err := nc.Validate(); err != nil {
			return fmt.Errorf("node %q: %w", nc.Name, err)
		}
		if seen[nc.Name] {
			return fmt.Errorf("node %q: name: is not unique", nc.Name)
		}
		seen[nc.Name] = true
		entries = append(entries, nc)
	}
	am := make(map[string][]ModelTarget, len(aliases))
	for _, a := range aliases {
		var sum float64
		for _, t := range a.Targets {
			sum += t.Weight
		}
		if sum <= 0 {
			return fmt.Errorf("models: alias %q has no positive weight", a.Name)
		}
		am[a.Name] = a.Targets
	}
	st := &settings{cfg: cfg, halfOpenProbes: max(1, cfg.Breaker.HalfOpenProbes), disc: p.fixedDisc}
	switch cfg.Policy {
	case "round_robin":
		st.policy = policyRoundRobin
	case "least_inflight":
		st.policy = policyLeastInflight
	}
	if st.disc == nil {
		st.disc = NewDNSDiscoverer(cfg.DNSResolver)
	}

	p.mu.Lock()
	defer p.mu.Unlock()
	p.st.Store(st)
	// Forget what was found for entries that are gone or now name another host.
	for name := range p.found {
		keep := false
		for _, e := range entries {
			if e.Name == name && e.Discover != "" && p.discoveredURL(name) == e.URL {
				keep = true
			}
		}
		if !keep {
			delete(p.found, name)
			delete(p.discErr, name)
			delete(p.drops, name)
		}
	}
	// What was found stays until the next lookup, under the new filter
	// (discover_allow, discover_max_nodes).
	for _, e := range entries {
		if addrs, ok := p.found[e.Name]; ok {
			p.found[e.Name], _ = filterAddrs(e, addrs, nil)
		}
	}
	p.entries, p.aliases = entries, am
	p.rebuildLocked()
	p.registerDiscoveryLocked()
	p.reconcileDiscoveryLocked()
	return nil
}

// discoveredURL is the URL of the entry called name as last applied.
func (p *Pool) discoveredURL(name string) string {
	for _, e := range p.entries {
		if e.Name == name {
			return e.URL
		}
	}
	return ""
}

// rebuildLocked computes the node set from the entries and what discovery
// found, and swaps it in.
func (p *Pool) rebuildLocked() {
	old := p.set.Load()
	ns := &nodeSet{byName: map[string]*Node{}, byModel: map[string][]*Node{}, queues: map[string]*slotQueue{},
		aliases: p.aliases, served: map[string]bool{}}
	var added []*Node
	for _, e := range p.entries {
		for _, m := range e.Models {
			ns.served[m] = true
			ns.queues[m] = p.queueLocked(m)
		}
		want := []NodeConfig{e}
		if e.Discover != "" {
			want = expand(e, p.found[e.Name])
		}
		for _, nc := range want {
			if ns.byName[nc.Name] != nil {
				continue // a static entry named like a discovered node wins
			}
			n := old.byName[nc.Name]
			if n == nil || !reflect.DeepEqual(n.cfg, nc) {
				nn := p.newNode(nc, e.Name)
				if n != nil {
					nn.inherit(n)
				}
				n = nn
				added = append(added, n)
			}
			ns.nodes = append(ns.nodes, n)
			ns.byName[nc.Name] = n
			for _, m := range nc.Models {
				ns.byModel[m] = append(ns.byModel[m], n)
				ns.queues[m] = p.queueLocked(m)
			}
		}
	}
	for _, n := range added {
		for m := range n.models {
			n.queues = append(n.queues, p.queueLocked(m))
		}
		p.registerNodeLocked(n)
	}
	p.set.Store(ns)
	for _, n := range old.nodes {
		if ns.byName[n.cfg.Name] != n {
			p.retireLocked(n)
		}
	}
	for _, n := range added {
		p.startNodeLocked(n)
	}
	for _, q := range ns.queues {
		if q.waiters.Load() > 0 {
			q.signal() // new capacity, perhaps
		}
	}
}

func (p *Pool) queueLocked(model string) *slotQueue {
	q := p.queues[model]
	if q == nil {
		q = newSlotQueue()
		p.queues[model] = q
	}
	return q
}

func (p *Pool) newNode(nc NodeConfig, entry string) *Node {
	n := &Node{p: p, cfg: nc, kind: parseKind(nc.Kind), models: map[string]bool{},
		healthURL: nc.HealthURL, metricsURL: nc.MetricsURL, seed: hash64(nc.Name)}
	if entry != nc.Name {
		n.entry = entry
	}
	if n.healthURL == "" {
		n.healthURL = serverRoot(nc.URL) + "/health"
	}
	if n.metricsURL == "" {
		n.metricsURL = serverRoot(nc.URL) + "/metrics"
	}
	n.shownURL, n.shownHealthURL, n.shownMetricsURL = redact.URL(nc.URL), redact.URL(n.healthURL), redact.URL(n.metricsURL)
	if n.modelsURL = modelsURL(nc, n.kind); n.modelsURL != "" {
		n.shownModelsURL, n.modelsAuth = redact.URL(n.modelsURL), modelsAuthFor(nc)
	}
	n.healthy.Store(true)
	for _, m := range nc.Models {
		n.models[m] = true
	}
	return n
}

// inherit carries over what stays true of a node whose entry changed: its
// health, an operator's drain, its latency averages and, at the same
// address, what its engine serves (checked against the new models).
func (n *Node) inherit(old *Node) {
	if c := old.served.Load(); c != nil && n.modelsURL == old.modelsURL {
		n.served.Store(&servedCheck{served: c.served, missing: compareServed(n.cfg.Models, c.served), enforce: c.enforce})
	}
	n.healthy.Store(old.healthy.Load())
	n.drained.Store(old.drained.Load())
	n.ttft.bits.Store(old.ttft.bits.Load())
	n.ttft.at.Store(old.ttft.at.Load())
	n.tpot.bits.Store(old.tpot.bits.Load())
	n.tpot.at.Store(old.tpot.at.Load())
	for o := range n.requests {
		n.requests[o].Store(old.requests[o].Load())
	}
}

// retireLocked takes n out of service: it takes no new request, and once
// its requests in flight have finished its probes stop and it is forgotten.
func (p *Pool) retireLocked(n *Node) {
	if n.retired.Swap(true) {
		return
	}
	p.retiring[n] = struct{}{}
	if n.inflight.Load() == 0 {
		p.forgetLocked(n)
		return
	}
	go func() {
		t := time.NewTicker(50 * time.Millisecond)
		defer t.Stop()
		for n.inflight.Load() > 0 {
			<-t.C
		}
		p.mu.Lock()
		p.forgetLocked(n)
		p.mu.Unlock()
	}()
}

// forgetLocked drops a retired node: its loops, its metric series (unless
// another node has its name) and, through onRemove, what its owner keeps.
func (p *Pool) forgetLocked(n *Node) {
	delete(p.retiring, n)
	if cancel := p.loops[n]; cancel != nil {
		cancel()
		delete(p.loops, n)
	}
	p.unregisterNodeLocked(n.cfg.Name)
	if p.onRemove != nil {
		p.onRemove(n)
	}
}
