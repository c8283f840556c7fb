package balancer

import (
	"hash/maphash"
	"math"
	"sync"
)

// Prefix is what the prefix scorer knows of a request's prompt: the
// cumulative hashes of its token prefix, cut at message boundaries and
// every block_tokens tokens. Two requests that share a prefix share the
// hashes up to where they part, so turn N+1 of a chat carries turn N's
// blocks. Build one with a PrefixHasher.
type Prefix struct {
	blocks  []prefixBlock
	tokens  int    // estimated prompt tokens, hashed or not
	session uint64 // the hash at the end of the first user message: the conversation (0 = none)
}

// prefixBlock is the hash of everything up to end (estimated tokens).
type prefixBlock struct {
	hash uint64
	end  int
}

// Tokens returns the estimated tokens of the whole prompt.
func (p *Prefix) Tokens() int { return p.tokens }

// Blocks returns how many prefix hashes were taken.
func (p *Prefix) Blocks() int { return len(p.blocks) }

// bytesPerToken converts bytes to tokens. Exact o200k counting through
// tiktoken-go costs 90-350 ns a byte (see admission), 1-3 ms for an
// 8 KB prompt, far too much for every request; block boundaries only need
// to be the same for the same text, and shares and capacities are
// estimates anyway.
const bytesPerToken = 4

// maxPrefixBlocks bounds the hashes of one request (and the work: the
// text past them is not hashed).
const maxPrefixBlocks = 1024

// prefixSeed keys every prefix hash of the process: the index lives in
// memory only.
var prefixSeed = maphash.MakeSeed()

// PrefixHasher builds a request's Prefix. Feed it each message in order:
// Message, then the content with Write (several times for content parts),
// then Prefix. The zero value is not usable; get one from
// Pool.PrefixHasher.
type PrefixHasher struct {
	h          maphash.Hash
	blockBytes int
	inBlock    int // bytes of content since the last boundary
	bytes      int // bytes so far
	blocks     []prefixBlock
	full       bool // maxPrefixBlocks reached: only count bytes
	open       bool // a message is open
	user       bool // the open message is the user's
	session    uint64
}

// PrefixHasher returns a hasher for one request, or nil when the prefix
// weight is 0 or the policy is not score (nothing is hashed then).
func (p *Pool) PrefixHasher() *PrefixHasher {
	st := p.st.Load()
	if st.cfg.Weights.Prefix <= 0 || st.policy != policyScore {
		return nil
	}
	h := &PrefixHasher{blockBytes: st.cfg.Prefix.BlockTokens * bytesPerToken}
	h.h.SetSeed(prefixSeed)
	return h
}

// Message starts a message with role: the previous one ends at a block
// boundary.
func (ph *PrefixHasher) Message(role []byte) {
	ph.endMessage()
	ph.open, ph.user = true, string(role) == "user"
	if ph.full {
		return
	}
	_, _ = ph.h.Write(role)
	_ = ph.h.WriteByte(0)
}

// Write adds content of the current message.
func (ph *PrefixHasher) Write(b []byte) {
	ph.bytes += len(b)
	for len(b) > 0 && !ph.full {
		k := min(len(b), ph.blockBytes-ph.inBlock)
		_, _ = ph.h.Write(b[:k])
		ph.inBlock += k
		b = b[k:]
		if ph.inBlock == ph.blockBytes {
			ph.boundary()
		}
	}
}

func (ph *PrefixHasher) endMessage() {
	if ph.open && !ph.full {
		_ = ph.h.WriteByte(0xff) // ends the message even at a block boundary
		ph.boundary()
		if ph.user && ph.session == 0 {
			// Every turn of a conversation begins with the same
			// messages up to its first user message.
			ph.session = ph.blocks[len(ph.blocks)-1].hash
		}
	}
	ph.open = false
}

func (ph *PrefixHasher) boundary() {
	ph.blocks = append(ph.blocks, prefixBlock{hash: ph.h.Sum64(), end: max(1, ph.bytes/bytesPerToken)})
	ph.inBlock = 0
	ph.full = len(ph.blocks) >= maxPrefixBlocks
}

// Prefix ends the last message and returns the request's prefix, nil if
// it has no content.
func (ph *PrefixHasher) Prefix() *Prefix {
	if ph == nil {
		return nil
	}
	ph.endMessage()
	if len(ph.blocks) == 0 {
		return nil
	}
	return &Prefix{blocks: ph.blocks, tokens: max(1, ph.bytes/bytesPerToken), session: ph.session}
}

// maxIndexEntries bounds one node's prefix index (about 40 bytes an
// entry): past it, the least recently used entries are dropped.
const maxIndexEntries = 1 << 16

// The capacity correction: after each scrape with prefix-cache queries,
// the share of routed prompt tokens the index predicted the node held is
// compared with the share the engine reports it hit, and the capacity the
// index ages blocks out by is scaled by exp(gain × (measured − predicted)),
// within [minCapScale, maxCapScale]. A comparison needs at least
// minCalibrationTokens routed since the last.
const (
	calibrationGain      = 1.0
	minCapScale          = 0.25
	maxCapScale          = 4.0
	minCalibrationTokens = 1024
)

// prefixIndex is one node's model of the prefix blocks its KV cache holds:
// the blocks of every request routed to it, each stamped with the node's
// clock (the tokens routed to it that it did not hold yet) when last
// routed. A block is presumed held while fewer than the node's capacity in
// new tokens have arrived since: an LRU cache of that size would still hold
// it. The capacity is the engine's (scaled by the correction above), so
// the model forgets what the node must have evicted. Traffic from other
// gateways is not seen, which the correction partly makes up for.
type prefixIndex struct {
	mu     sync.RWMutex
	clock  int64
	stamps map[uint64]int64
	scale  float64 // the capacity correction; 0 = 1
	// The routed prompt tokens since the last correction, and those of
	// them the index presumed held.
	routed, presumed    int64
	compared            bool    // a comparison was made
	predicted, measured float64 // the last comparison's hit rates
}

// effectiveLocked is the capacity blocks age out by: the engine's, scaled.
func (ix *prefixIndex) effectiveLocked(capacity int64) int64 {
	if ix.scale == 0 {
		return capacity
	}
	return max(1, int64(float64(capacity)*ix.scale))
}

func (ix *prefixIndex) heldLocked(h uint64, capacity int64) bool {
	at, ok := ix.stamps[h]
	return ok && ix.clock-at < capacity
}

// match returns the estimated tokens of the longest unbroken run of
// leading blocks the node still holds (as vLLM and llm-d count a hit).
// Blocks are chained (each hashes everything before it), so a request with
// block i has every block before it, and routing it re-stamps them all:
// a block's stamp is never newer than its predecessor's, and a binary
// search finds the run in a few map lookups.
func (ix *prefixIndex) match(blocks []prefixBlock, capacity int64) int {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	if len(ix.stamps) == 0 {
		return 0
	}
	capacity = ix.effectiveLocked(capacity)
	lo, hi := 0, len(blocks) // blocks[:lo] held; blocks[hi:] not
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		if ix.heldLocked(blocks[mid].hash, capacity) {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	if lo == 0 {
		return 0
	}
	return blocks[lo-1].end
}

// insert records that blocks were routed to the node: the tokens it did
// not hold advance its clock, and every block is stamped with it.
func (ix *prefixIndex) insert(blocks []prefixBlock, capacity int64) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	if ix.stamps == nil {
		ix.stamps = make(map[uint64]int64, 256)
	}
	capacity = ix.effectiveLocked(capacity)
	prev := 0
	var fresh int64
	for _, b := range blocks {
		if !ix.heldLocked(b.hash, capacity) {
			fresh += int64(b.end - prev)
		}
		prev = b.end
	}
	ix.routed += int64(prev)
	ix.presumed += int64(prev) - fresh
	ix.clock += fresh
	for _, b := range blocks {
		ix.stamps[b.hash] = ix.clock
	}
	if len(ix.stamps) > maxIndexEntries {
		ix.pruneLocked(capacity)
	}
}

// calibrate compares the hit rate the index predicted for the tokens
// routed since the last call with the engine's measured one, and corrects
// the capacity. It returns false, changing nothing, while too few tokens
// were routed to compare.
func (ix *prefixIndex) calibrate(measured float64) bool {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	if ix.routed < minCalibrationTokens {
		return false
	}
	predicted := float64(ix.presumed) / float64(ix.routed)
	ix.routed, ix.presumed = 0, 0
	scale := ix.scale
	if scale == 0 {
		scale = 1
	}
	ix.scale = min(maxCapScale, max(minCapScale, scale*math.Exp(calibrationGain*(measured-predicted))))
	ix.predicted, ix.measured, ix.compared = predicted, measured, true
	return true
}

// expire drops the blocks the node must have evicted, so that the index
// holds what the model says the node holds.
func (ix *prefixIndex) expire(capacity int64) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	capacity = ix.effectiveLocked(capacity)
	for h, at := range ix.stamps {
		if ix.clock-at >= capacity {
			delete(ix.stamps, h)
		}
	}
}

// pruneLocked drops the blocks aged out, then, while the index is still
// over three quarters full, the older half of what remains by age.
func (ix *prefixIndex) pruneLocked(capacity int64) {
	for age := capacity; len(ix.stamps) > maxIndexEntries*3/4 && age > 0; age /= 2 {
		for h, at := range ix.stamps {
			if ix.clock-at >= age {
				delete(ix.stamps, h)
			}
		}
	}
}

// status returns the index's size, scale and last comparison.
func (ix *prefixIndex) status(capacity int64) PrefixIndexStatus {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	st := PrefixIndexStatus{Blocks: len(ix.stamps), CapacityTokens: capacity, EffectiveTokens: ix.effectiveLocked(capacity), Scale: 1}
	if ix.scale != 0 {
		st.Scale = ix.scale
	}
	if ix.compared {
		p, m := ix.predicted, ix.measured
		st.PredictedHitRate, st.MeasuredHitRate = &p, &m
	}
	return st
}

// size returns the number of blocks in the index.
func (ix *prefixIndex) size() int {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	return len(ix.stamps)
}

// capacityTokens is the node's KV capacity: what it publishes (vLLM's
// cache_config_info), else prefix.capacity_tokens. The index scales it by
// its correction.
func (p *Pool) capacityTokens(n *Node) int64 {
	if c := n.kvCapacity.Load(); c > 0 {
		return c
	}
	return int64(p.conf().Prefix.CapacityTokens)
}

// Routed records that a request with prefix was sent to n (call it once
// the node's slot is taken): its blocks go into n's index, and its
// conversation now lives on n. A nil prefix does nothing.
func (p *Pool) Routed(n *Node, prefix *Prefix) {
	if prefix == nil {
		return
	}
	n.prefix.insert(prefix.blocks, p.capacityTokens(n))
	if prefix.session != 0 {
		p.sessions.routed(prefix.session, n, p.nowNanos())
	}
}

// prefixShare is the share of the request's prompt tokens node n likely
// holds, in [0,1].
func (p *Pool) prefixShare(n *Node, prefix *Prefix) float64 {
	held := n.prefix.match(prefix.blocks, p.capacityTokens(n))
	return min(1, float64(held)/float64(prefix.tokens))
}
