// Package cache stores answers and finds them again: exact keys over a
// canonical form of the request, semantic scopes with nearest-neighbour
// search, the memory (LRU) and Redis stores, false-hit guards, coalescing of
// identical misses, and entry encoding for replay as JSON or SSE. It never
// imports router, balancer or adapters.
package cache
