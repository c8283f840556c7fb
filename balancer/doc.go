// Package balancer knows the GPU nodes and chooses among them: per-node
// in-flight counts and caps, health, engine metrics scraped from /metrics,
// scores, circuit breakers and ejection, and model aliases with weighted
// (canary) targets. It returns an ordered list of candidates; the caller
// tries them in order. It never imports adapters or router.
package balancer
