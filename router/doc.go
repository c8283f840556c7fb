// Package router is the gateway: the fasthttp server, request validation,
// admission, node choice with retries, spill-over, the streaming pump,
// and the admin and status endpoints. It orchestrates one request at a
// time and nothing imports it. The cache side of a request is
// router/reuse; the configuration is router/config; the operator's
// surface is router/admin.
//
// One streamed miss that is written back, file by file in call order:
// server.go (routes), inference.go (the exchange: enter, parse, admit;
// tenants.go names the tenant, bodycheck.go bounds the parse,
// responses.go's hook refuses another tenant's state), cache.go (the
// request as the cache sees it), reuse/plan.go and reuse/lookup.go (Plan,
// Lookup: here a Lead), forward.go (node choice, attempts, retries on
// another node), respond.go (commitStream and the pump; streambody.go
// writes the stream), reuse/flight.go (Publish, Finish) and
// reuse/writeback.go (the answer stored, the flight retired), then
// respond.go's finish (metrics.go, dashboard.go count). A hit ends at
// cache.go's serveHit; a follower at respond.go's follow. errors.go holds
// every error answer the gateway makes itself; spill.go the hosted API.
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
