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
//	server.go          routes; framing the cache and the node could read apart
//	tenants.go         the tenant of the bearer key
//	admin/guard.go     an operator's request (its answer is curated)
//	inference.go       the exchange: enter, parse within the budget, admit,
//	                   the request as the cache sees it, Plan and Lookup
//	responses.go       the Responses API's hook: state stays with its tenant
//	reuse/lookup.go    Plan, then Lookup: here a Lead
//	reuse/verify.go    the threshold as the judge's evidence moved it
//	reuse/flight.go    the flight: Publish, Finish, the write-back
//	forward.go         node choice, attempts, retries on another node
//	respond.go         commitStream, the pump, finish
//	reuse/metrics.go   the cache's outcome counted; the store's observer
//	metrics.go         the request counted, and the dashboard's counts
//
// A hit ends at inference.go's serveHit; a follower at respond.go's follow.
// internal/reply holds every error answer the gateway makes itself, and
// internal/streambody writes a stream's chunks. forward.go's upstream is
// how a request reaches a node or the hosted API (spill.go): it holds no
// gateway, and the judge's calls take the same way (judge.go).
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
