// Package router is the gateway: the fasthttp server, request validation,
// the cache lookups, admission, node choice with retries, spill-over, the
// streaming pump with write-back, and the admin and status endpoints. It
// wires the other packages together; nothing imports it.
//
// One request's life, file by file in call order: server.go (routes, the
// transport's errors), inference.go (the exchange: validate, admit, plan
// the cache, lead or follow a flight), cache.go (lookups, replay,
// write-back; outcome.go names what the cache did), forward.go (node
// choice, attempts, retries on another node), spill.go (the hosted API),
// respond.go (commit as JSON or as a stream, the pump, settle, finish).
// errors.go holds every error answer the gateway makes itself.
//
// Off the request path, verify.go's judge audits semantic hits and
// near-misses (promote.go: approved near-misses take a curated answer). It
// holds no gateway: it asks the judge model through judge.go's
// judgeSender, which the gateway implements with forward.go's attempts
// and spill.go's spill-over, as a client's request goes.
// metrics.go declares every metric family of the router, beside its help
// text, and makes all their series, into the fields of the stages'
// structs; the stages only count. It is over 600 lines because it is the
// one list of the router's families: split, the list would be two.
//
// POST /v1/responses takes the same path; responses.go holds what is its
// own: the requests the cache must not answer, the ids of the responses
// passed on and who holds each (responses_shared.go: shared in Redis),
// follow-ups sent to that node, and GET/DELETE /v1/responses/{id}.
package router
