// Package cache stores answers and finds them again: exact keys over a
// canonical form of the request; semantic scopes searched for the nearest
// neighbours, in process (VectorIndex) or by RediSearch; the memory (LRU)
// and Redis stores; the false-hit guards that veto a near neighbour whose
// numbers, negations, entities or word order differ; and Backend, which
// puts a store behind read timeouts, circuit breakers and a write-back
// queue. An Entry holds what a replay needs and is stored as JSON
// (s2-compressed in Redis when large). Coalescing identical misses is the
// router's (router/flight.go), and so is replaying an entry as JSON or
// SSE, with adapters' encoders. It never imports router, balancer or
// adapters.
package cache
