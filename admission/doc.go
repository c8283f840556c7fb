// Package admission decides which requests may go on and, for cache misses,
// which may use the GPUs.
//
// Every request, cache hits included, passes Enter: the tenant's request
// rate (rps, burst) and its max_concurrency slot, held until Pass.Release.
// Cache misses then pass AdmitMiss: the tenant's tokens_per_minute and the
// global rps, burst and tokens_per_minute, charged up front (prompt tokens
// plus max_tokens) and settled against the real usage with Charge.Settle.
// Hits never touch a token or global budget.
//
// Limits are token buckets (rps: capacity burst; tokens: capacity one
// minute's budget). Over a limit, a request waits up to Config.MaxWait for
// capacity: a bucket reserves the capacity at decision time and the caller
// sleeps until it is due, so waiting costs no extra decision; a full
// concurrency cap is waited on until a slot is released. A request that
// cannot be served within MaxWait is rejected at once with the limit's name
// and a Retry-After.
//
// Bucket is the same token bucket for callers outside the Admitter (Take,
// Refund, Drain; safe for concurrent use), except that it never reserves:
// a Take that would have to wait takes nothing and returns the wait.
//
// With the redis backend the buckets and concurrency slots live in Redis,
// so every replica shares one quota. Each decision is one Lua script (one
// round trip) using the server's clock. Concurrency slots are leases in a
// sorted set scored by expiry: a replica renews its live leases in the
// background, and a crashed replica's leases expire after Config.LeaseTTL.
// When Redis fails, rate and token decisions fall back to local buckets
// sized at quota ÷ Config.Replicas, and Redis is asked again after
// Config.RedisRetry. A concurrency cap is never split: a tenant with
// MaxConcurrency is refused while Redis does not answer (a local share
// would come on top of the slots held in Redis; see enterOnce). Renewal
// adds back held leases Redis lost (a restart, a failover), and the first
// decision after a failure renews first. Each degraded state is a
// rate-limited WARN on Config.Log, a metric and a Status field.
//
// Key layout under P = Config.KeyPrefix + "a:" (tenant names only, escaped;
// never API keys). Hash tags keep every script's keys in one cluster slot:
//
//	P{t:<tenant>}:rps   HASH  v=tokens t=ms   tenant request bucket
//	P{t:<tenant>}:conc  ZSET  lease id -> expiry (ms)
//	P{g}:tpm:<tenant>   HASH  tenant token bucket (beside the global ones,
//	                          so AdmitMiss is one single-slot script)
//	P{g}:rps, P{g}:tpm  HASH  global buckets (cache misses only)
//
// Every key expires once its bucket would be full again or its last lease
// has expired. A call that times out after the script ran may leave a
// charge or an untracked lease behind; the lease expires after LeaseTTL.
//
// Use, per request:
//
//	pass, rej := a.Enter(ctx, tenant) // every request, before the cache
//	if rej != nil { /* 429 with Retry-After: rej.RetryAfterSeconds() */ }
//	defer pass.Release()              // or at the end of the stream
//	// ... cache lookup; on a miss:
//	charge, rej := a.AdmitMiss(ctx, tenant, a.UpfrontTokens(CountTokens(prompt), maxTokens, n))
//	// ... forward; when usage is known:
//	charge.Settle(usage.TotalTokens)
package admission
