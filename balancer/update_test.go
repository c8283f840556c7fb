package balancer

import (
	"context"
	"errors"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"frontdoor/internal/testenv"
)

func nodeStates(p *Pool) []string {
	var out []string
	for _, st := range p.Status() {
		out = append(out, st.Name+"="+st.State)
	}
	slices.Sort(out)
	return out
}

// Update changes the node set in place: an unchanged node keeps its state,
// a changed one is replaced (keeping its drain), a removed one takes no new
// request and is forgotten once its request in flight is released.
func TestUpdateReplacesNodesInPlace(t *testing.T) {
	p, _ := newTestPool(t, nil, testNodes(3))
	set := metrics.NewSet()
	p.RegisterMetrics(set)
	a, b, c := p.Node("a"), p.Node("b"), p.Node("c")
	if !a.TryAcquire() {
		t.Fatal("acquire a")
	}
	if err := p.Drain("b"); err != nil {
		t.Fatal(err)
	}
	nodes := testNodes(3)[1:] // b and c
	nodes[0].Weight = 2       // b changes
	nodes = append(nodes, NodeConfig{Name: "d", URL: "http://127.0.0.1:1/d", Models: []string{"m"}})
	if err := p.Update(DefaultConfig(), nodes, nil); err != nil {
		t.Fatal(err)
	}
	if p.Node("a") != nil || p.Node("c") != c || p.Node("b") == b || p.Node("d") == nil {
		t.Fatal("a should be gone, c kept, b replaced, d added")
	}
	if !p.Node("b").Drained() {
		t.Fatal("the replaced node lost its drain")
	}
	if got := nodeStates(p); !slices.Equal(got, []string{"a=removed", "b=drained", "c=healthy", "d=healthy"}) {
		t.Fatalf("status %v", got)
	}
	if a.TryAcquire() {
		t.Fatal("a removed node took a request")
	}
	cands, _ := p.Pick("m", 0)
	for _, n := range cands {
		if n == a || n.Name() == "b" {
			t.Fatalf("picked %s", n.Name())
		}
	}
	a.Release()
	testenv.Eventually(t, 2*time.Second, func() bool { return slices.Equal(nodeStates(p), []string{"b=drained", "c=healthy", "d=healthy"}) },
		"the drained node was not forgotten: %v", nodeStates(p))
	var buf strings.Builder
	set.WritePrometheus(&buf)
	if s := buf.String(); contains(s, `node="a"`) || !contains(s, `frontdoor_node_inflight{node="d"}`) {
		t.Fatalf("metrics do not follow the node set:\n%s", s)
	}
	// An invalid update changes nothing.
	if err := p.Update(DefaultConfig(), []NodeConfig{{Name: "x"}}, nil); err == nil || p.Node("c") != c {
		t.Fatalf("invalid update: %v", err)
	}
}

type fakeDiscoverer struct {
	mu    sync.Mutex
	addrs []netip.Addr
	err   error
}

func (f *fakeDiscoverer) Discover(context.Context, string) ([]netip.Addr, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.addrs, f.err
}

func (f *fakeDiscoverer) set(err error, addrs ...string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.err, f.addrs = err, nil
	for _, a := range addrs {
		f.addrs = append(f.addrs, netip.MustParseAddr(a))
	}
}

// A discover entry expands to one node per address, URLs rewritten, and a
// failing lookup keeps what was found.
func TestDiscoverExpandsAndKeepsOnError(t *testing.T) {
	d := &fakeDiscoverer{}
	d.set(nil, "10.0.0.2", "fd00::5")
	cfg := DefaultConfig()
	cfg.HealthInterval = 3600e9
	p, err := New(cfg, []NodeConfig{{Name: "v", URL: "http://vllm.svc:8000/v1", Models: []string{"m"},
		HealthURL: "http://vllm.svc:8000/health", Discover: "dns", DiscoverInterval: 20e6}}, nil, WithDiscoverer(d))
	if err != nil {
		t.Fatal(err)
	}
	if served, _ := p.Pick("m", 0); served != nil {
		t.Fatal("nodes before the first lookup")
	}
	if _, ok := p.Resolve("m", "x"); !ok {
		t.Fatal("a model of a discover entry with no node yet is unknown")
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { p.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	testenv.Eventually(t, 2*time.Second, func() bool { return len(p.Nodes()) == 2 }, "no discovered nodes")
	n6 := p.Node("v-fd00::5")
	if n6 == nil || n6.Config().URL != "http://[fd00::5]:8000/v1" || n6.healthURL != "http://[fd00::5]:8000/health" || n6.Config().Discover != "" {
		t.Fatalf("expanded node: %+v", n6)
	}
	d.set(errors.New("servfail"))
	testenv.Eventually(t, 2*time.Second, func() bool { ds := p.Discovery(); return len(ds) == 1 && ds[0].Error != "" }, "no error in Discovery")
	if len(p.Nodes()) != 2 {
		t.Fatal("a failing lookup dropped nodes")
	}
	d.set(nil, "10.0.0.3")
	testenv.Eventually(t, 2*time.Second, func() bool { return len(p.Nodes()) == 1 && p.Node("v-10.0.0.3") != nil }, "nodes %v", nodeStates(p))
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }
