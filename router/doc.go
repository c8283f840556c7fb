// Package router is the gateway: the fasthttp server, request validation,
// admission, node choice with retries, spill-over, the streaming pump,
// and the admin and status endpoints. It orchestrates one request at a
// time and nothing imports it. The cache side of a request is
// router/reuse; the configuration is router/config; the operator's
// surface is router/admin.
//
// One streamed miss that is written back runs code in these files of the
// router tree, in the order it first enters each (bench/requestlife
// measures it, and make test checks this list against it):
//
//	server.go          routes, the server's own settings
//	transport.go       framing the cache and the node could read apart
//	tenants.go         the tenant of the bearer key
//	admin/guard.go     an operator's request (its answer is curated)
//	inference.go       the exchange: enter, parse, admit, plan, look up
//	ratelimit.go       the RateLimit headers
//	bodycheck.go       the parse budget
//	responses.go       the Responses API's hook: state stays with its tenant
//	cache.go           the request as the cache sees it; a hit's replay
//	reuse/plan.go      Plan
//	reuse/verify.go    the threshold as the judge's evidence moved it
//	reuse/lookup.go    Lookup: here a Lead
//	reuse/flight.go    the flight: Publish, Finish, the write-back
//	forward.go         node choice, attempts, retries on another node
//	gateway.go         the node's backend
//	respond.go         commitStream, the pump, finish
//	streambody.go      the stream's body writer
//	reuse/metrics.go   the cache's outcome counted; the store's observer
//	metrics.go         the request counted
//	dashboard.go       the dashboard's counts
//
// A hit ends at cache.go's serveHit; a follower at respond.go's follow.
// errors.go holds every error answer the gateway makes itself; spill.go
// the hosted API.
//
// Off the request path, reuse's verifier audits semantic hits and
// near-misses; it asks the judge model through judge.go's SendJudge,
// which uses forward.go's attempts and spill.go's spill-over, as a
// client's request goes.
//
// metrics.go declares every metric family of the router, beside its help
// text, and makes their series into the fields of the stages' structs;
// the stages only count (the cache side's are in reuse/metrics.go).
//
// POST /v1/responses takes the same path; responses.go holds what is its
// own: the requests the cache must not answer, the ids of the responses
// passed on and who holds each (responses_shared.go: shared in Redis),
// follow-ups sent to that node, and GET/DELETE /v1/responses/{id}.
package router
