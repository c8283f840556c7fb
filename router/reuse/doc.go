// Package reuse is the cache side of a request: it decides whether an
// answer already given may answer this request, and keeps the answer this
// request gets for the next one. The router calls it through a few verbs
// and turns what they return into headers, a replay or a forward:
//
//	Plan(Request, Hints) -> *Plan          what the cache will do (lookup.go)
//	Lookup(Plan)         -> Found          Hit | Lead | Follow | Bypass | Absent, with its Outcome (lookup.go)
//	Flight.Publish, Finish, FinishJSON, Fail   the leader's answer, shared (flight.go)
//	Flight.Wait, Next, Result, Hit        a follower's side (flight.go)
//
// A flight ends in its write-back (flight.go too), which retires it once
// its answer is stored or dropped. Admin deletes go through Cache's
// admin.CacheOps methods (reuse.go), which retire every flight first, so
// no answer produced across a deletion is served or stored.
//
// Around them: embeddings' per-input plan (embeddings.go), imports of
// answered pairs (import.go), the hot list (hot.go), the judge's audit of
// semantic hits and near-misses (verify.go) and the promotions it
// approves (promote.go), and every metric family of the cache side,
// declared once, with the store's observer (metrics.go).
package reuse
