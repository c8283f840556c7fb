package balancer

import (
	"strconv"
	"testing"
)

// TestConversationStaysOnItsNode: a conversation's turns stay on the node
// of its first turn even when another node holds the same system prompt
// and looks better on memory; once its node is loaded past the margin the
// conversation moves once and stays on its new node.
func TestConversationStaysOnItsNode(t *testing.T) {
	p, _ := newTestPool(t, withPrefix, nodesWith(2, 32))
	a, b := p.Node("a"), p.Node("b")
	sys := words("system", 1500)
	// Both nodes hold the system prompt; b has more free KV memory.
	p.Routed(b, chat(t, p, "system", sys, "user", "someone else's question"))
	turn := []string{"system", sys, "user", "my question"}
	p.Routed(a, chat(t, p, turn...))
	feed(p, a, vllmText(0, 0, 0.6))
	feed(p, b, vllmText(0, 0, 0.1))
	for i := range 5 {
		turn = append(turn, "assistant", "answer "+strconv.Itoa(i), "user", "follow-up "+strconv.Itoa(i))
		px := chat(t, p, turn...)
		got, _ := p.PickWith("m", Hints{Prefix: px})
		if got[0] != a {
			t.Fatalf("turn %d went to %v, want a (the conversation's node)", i+2, names(got))
		}
		p.Routed(got[0], px)
	}
	// Without the conversation, b's memory wins: the stickiness decided.
	if got, _ := p.PickWith("m", Hints{Prefix: chat(t, p, "system", sys, "user", "a new conversation")}); got[0] != b {
		t.Fatalf("a new conversation went to %v, want b", names(got))
	}

	// a loaded past the margin (4 against 0: over balance_abs 3 and
	// balance_rel 1.5 times): the conversation moves to b, once.
	acquire(t, a, 4)
	turn = append(turn, "assistant", "answer", "user", "after a got busy")
	px := chat(t, p, turn...)
	got, _ := p.PickWith("m", Hints{Prefix: px})
	if got[0] != b {
		t.Fatalf("with a loaded past the margin: %v, want b", names(got))
	}
	p.Routed(got[0], px)
	for range 4 {
		a.Release()
	}
	acquire(t, b, 2) // b a little busier than a now, within the margin
	turn = append(turn, "assistant", "answer", "user", "after the move")
	if got, _ := p.PickWith("m", Hints{Prefix: chat(t, p, turn...)}); got[0] != b {
		t.Fatalf("after the move: %v, want b (the conversation stays on its new node)", names(got))
	}
	st := p.Sessions()
	if st.Turns[SessionMoved] != 1 || st.Turns[SessionStayed] != 5 || st.Turns[SessionNew] != 2 {
		t.Fatalf("sessions %+v, want 2 new (two first turns), 5 stayed, 1 moved", st)
	}
}

// TestSessionKey: the turns of one conversation share a key; another
// first question, or none (a prompt without a user message), does not.
func TestSessionKey(t *testing.T) {
	p, _ := newTestPool(t, withPrefix, testNodes(1))
	sys := words("sys", 300)
	t1 := chat(t, p, "system", sys, "user", "q1")
	t3 := chat(t, p, "system", sys, "user", "q1", "assistant", "a1", "user", "q2", "assistant", "a2", "user", "q3")
	other := chat(t, p, "system", sys, "user", "another q1")
	if t1.session == 0 || t1.session != t3.session || other.session == t1.session {
		t.Fatalf("sessions: turn 1 %x, turn 3 %x, another conversation %x", t1.session, t3.session, other.session)
	}
	if s := chat(t, p, "system", sys).session; s != 0 {
		t.Fatalf("a prompt without a user message has session %x", s)
	}
}

// TestPrefixIndexForgetsWhatTheNodeEvicted: once more than the node's
// capacity in new tokens has gone to it, the blocks routed before are
// dropped from its index at the next scrape and no longer match.
func TestPrefixIndexForgetsWhatTheNodeEvicted(t *testing.T) {
	p, _ := newTestPool(t, func(c *Config) { withPrefix(c); c.Prefix.CapacityTokens = 4000 }, testNodes(1))
	n := p.Node("a")
	first := chat(t, p, "system", words("first", 1000), "user", "q")
	p.Routed(n, first)
	if p.prefixShare(n, first) < 0.9 {
		t.Fatal("a prefix just routed is not held")
	}
	one := n.prefix.size()
	for i := range 4 { // 4 × 1000 new tokens: the first has aged out
		p.Routed(n, chat(t, p, "system", words("other"+strconv.Itoa(i), 1000), "user", "q"))
	}
	if s := p.prefixShare(n, first); s != 0 {
		t.Fatalf("share %.2f after the node's capacity in new tokens, want 0", s)
	}
	before := n.prefix.size()
	feed(p, n, vllmText(0, 0, 0.5))
	if got := n.prefix.size(); got > before-one {
		t.Fatalf("index holds %d blocks after expiry, %d before (one prompt is %d): the evicted were kept", got, before, one)
	}
	if st := p.Status()[0].PrefixIndex; st.Blocks != n.prefix.size() || st.CapacityTokens != 4000 {
		t.Fatalf("status %+v", st)
	}
}

// TestPrefixCapacityCorrectedByMeasuredHits: when the engine hits less
// than the index predicts, the capacity it ages out by shrinks, and a
// prefix it presumed held is then presumed evicted; when the engine hits
// more, it grows back.
func TestPrefixCapacityCorrectedByMeasuredHits(t *testing.T) {
	p, _ := newTestPool(t, func(c *Config) { withPrefix(c); c.Prefix.CapacityTokens = 8000 }, testNodes(1))
	n := p.Node("a")
	sys := words("sys", 2000)
	hits, queries := 0.0, 0.0
	scrape := func(rate float64) {
		queries += 10000
		hits += 10000 * rate
		feed(p, n, vllmText(0, 0, 0.5)+"vllm:prefix_cache_queries_total{engine=\"0\",model_name=\"m\"} "+ftoa(queries)+"\n"+
			"vllm:prefix_cache_hits_total{engine=\"0\",model_name=\"m\"} "+ftoa(hits)+"\n")
	}
	scrape(0)
	old := chat(t, p, "system", sys, "user", "q")
	p.Routed(n, old)
	// Routed again and again: the index predicts nearly all of it held
	// while the engine reports a quarter.
	for i := range 8 {
		px := chat(t, p, "system", sys, "user", "q")
		p.Routed(n, px)
		p.Routed(n, chat(t, p, "system", words("new"+strconv.Itoa(i), 600), "user", "q"))
		scrape(0.25)
	}
	st := p.Status()[0].PrefixIndex
	if st.Scale >= 0.5 || st.PredictedHitRate == nil || *st.MeasuredHitRate != 0.25 || st.EffectiveTokens >= 4000 {
		t.Fatalf("after the engine hit less than predicted: %+v, want the capacity scaled down", st)
	}
	shrunk := st.Scale
	for i := range 8 {
		p.Routed(n, chat(t, p, "system", sys, "user", "q"))
		p.Routed(n, chat(t, p, "system", words("more"+strconv.Itoa(i), 600), "user", "q"))
		scrape(1)
	}
	if st := p.Status()[0].PrefixIndex; st.Scale <= shrunk {
		t.Fatalf("after the engine hit more than predicted: scale %.2f, want above %.2f", st.Scale, shrunk)
	}
}
