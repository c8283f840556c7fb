package gpusim

import (
	"container/list"
	"sync"
	"sync/atomic"
)

// prefixCache imitates vLLM's automatic prefix caching: a prompt's full
// KV blocks are keyed by the hash of everything up to and including them,
// a request reuses the longest run of leading blocks already cached, and
// the least recently used blocks are evicted beyond capacity.
//
// Simplifications: blocks are BlockSize×4 bytes of prompt text (gpusim's
// token estimate is bytes/4); only prompt blocks are cached, not the
// generated answer; and cached blocks do not compete with running requests
// for room (vLLM cannot evict a block a running request holds).
type prefixCache struct {
	capacity int // blocks

	mu     sync.Mutex
	lru    list.List // of uint64 block hashes, most recent first
	blocks map[uint64]*list.Element

	queries atomic.Int64 // prompt tokens looked up
	hits    atomic.Int64 // prompt tokens found cached
}

func newPrefixCache(capacity int) *prefixCache {
	return &prefixCache{capacity: capacity, blocks: make(map[uint64]*list.Element, capacity)}
}

// lookupAndInsert counts the leading blocks of hashes already cached,
// records the query (promptTokens) and the hit (cached blocks × tokens a
// block), then caches every block of hashes as most recently used. It
// returns the cached tokens.
func (c *prefixCache) lookupAndInsert(hashes []uint64, blockTokens, promptTokens int) int {
	c.mu.Lock()
	hit := 0
	for hit < len(hashes) && c.blocks[hashes[hit]] != nil {
		hit++
	}
	for _, h := range hashes {
		if e := c.blocks[h]; e != nil {
			c.lru.MoveToFront(e)
			continue
		}
		c.blocks[h] = c.lru.PushFront(h)
		if c.lru.Len() > c.capacity {
			old := c.lru.Back()
			c.lru.Remove(old)
			delete(c.blocks, old.Value.(uint64))
		}
	}
	c.mu.Unlock()
	tokens := min(hit*blockTokens, promptTokens)
	c.queries.Add(int64(promptTokens))
	c.hits.Add(int64(tokens))
	return tokens
}

// len returns the number of cached blocks.
func (c *prefixCache) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lru.Len()
}

// blockHasher cuts a prompt text into blocks of size bytes and returns the
// cumulative FNV-64a hash at the end of each full block: equal hashes mean
// equal prompt prefixes.
type blockHasher struct {
	size, n int
	h       uint64
	out     []uint64
}

func (b *blockHasher) write(p []byte) {
	for len(p) > 0 {
		k := min(len(p), b.size-b.n)
		b.h = fnvAdd(b.h, p[:k])
		b.n += k
		p = p[k:]
		if b.n == b.size {
			b.out = append(b.out, b.h)
			b.n = 0
		}
	}
}

var newline = []byte{'\n'}

// promptBlocks returns the cumulative block hashes of the prompt text of v
// (see PromptText), blockTokens×4 bytes a block.
func promptBlocks(walk func(func([]byte)), blockTokens int) []uint64 {
	b := blockHasher{size: blockTokens * 4, h: fnvOffset}
	first := true
	walk(func(part []byte) {
		if !first {
			b.write(newline)
		}
		first = false
		b.write(part)
	})
	return b.out
}
