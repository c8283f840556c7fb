// Package balancer knows the GPU nodes and chooses among them: per-node
// in-flight counts and caps, health, engine metrics scraped from /metrics,
// scores, circuit breakers and ejection, and model aliases with weighted
// (canary) targets. Pick returns an ordered list of candidates; the caller
// tries them in order. It never imports adapters or router.
//
// # Signals
//
// In-flight: the gateway's own count per node, exact (TryAcquire/Release).
//
// Engine metrics: Run scrapes each node's metrics_url (default <server
// root>/metrics) every scrape_interval, reading per kind
//
//	vllm    vllm:num_requests_waiting, vllm:num_requests_running,
//	        vllm:kv_cache_usage_perc (before 0.9: vllm:gpu_cache_usage_perc)
//	tgi     tgi_queue_size, tgi_batch_current_size, memory =
//	        tgi_batch_current_max_tokens / tgi_batch_max_total_tokens
//	sglang  sglang:num_queue_reqs, sglang:num_running_reqs, sglang:token_usage
//	openai  nothing
//
// Counts add up across data-parallel ranks (vLLM's engine label, SGLang's
// dp_rank) and are maxed across series of one rank (SGLang repeats its
// scheduler's view per tensor-parallel rank); memory is the fullest rank.
// A metric that is absent, NaN, or older than stale_after is unknown.
//
// Latency: an EWMA (α 0.2) of the first-byte times passed to Report, and of
// per-token times passed to ReportTokens. An average with no sample for
// 10 × stale_after is forgotten (unknown), so an avoided node is re-measured.
//
// Health: an active probe of health_url every health_interval (health_failures
// failed probes in a row mark a node that has passed one unhealthy, the
// first failure one that never has; one good probe restores it), plus passive health: a failure reported while the node has nothing
// else in flight marks it unhealthy until the next probe. After each probe
// that passes, the engine's own model list (/v1/models; TGI: /info) is read:
// a configured model it does not list takes the node out for that model
// only (ModelMismatch; not on TGI, which ignores the name). A node whose
// list cannot be read is not checked.
//
// # Filters
//
// A candidate serves the model, is healthy, not drained, below
// max_concurrency, its breaker not open (half-open: a trial slot free), and
// not ejected. Ejected nodes come back only as a last resort: when every
// other node serving the model is down, drained or cut off (not merely
// full), so ejection never turns overload into an outage.
//
// # Scores
//
// Policy score orders candidates by a weighted mean of five components in
// [0,1], multiplied by the node's weight; ties break at random:
//
//	queue    (1 − 0.75·o²) ÷ (1 + w). o is the engine's running requests over
//	         its slots (max_concurrency, or the batch size the engine was seen
//	         queueing at, if smaller); w is its waiting requests. Both come
//	         from the last scrape, corrected by the change in this gateway's
//	         in-flight count since then, so a burst does not pile onto a node
//	         that looked idle a second ago.
//	latency  (best + 25ms) ÷ (ttft + 25ms), against the lowest TTFT average
//	         among the candidates.
//	memory   1 − KV-cache usage.
//	affinity 1 for the rendezvous-hash favourite of the request's affinity
//	         key among the candidates, else 0 (left out without a key).
//	prefix   the share of the request's prompt tokens the node likely holds
//	         in its KV cache (left out without a prefix, and never computed
//	         with weight 0). See below.
//
// # Prefix scorer
//
// The router cuts the prompt (role and text of each message, in order) at
// every message's end and every prefix.block_tokens tokens, and hashes
// everything up to each cut (PrefixHasher): two requests share hashes up to
// where their prompts part, so turn N+1 of a chat carries turn N's. Tokens
// are estimated at 4 bytes each: exact counting with tiktoken-go costs
// 90-350 ns a byte, and the cuts only need to be the same for the same text.
//
// Each node keeps a model of its KV cache: an index of the hashes routed
// to it (Routed, once its slot is taken), stamped with the node's clock,
// the tokens routed to it that it did not hold yet. A hash is presumed held
// while fewer than the node's effective capacity in new tokens have arrived
// since it was last routed there: what an LRU cache of that size (vLLM's,
// SGLang's radix cache, llm-d's) would still hold. The capacity is what the
// engine publishes, vLLM's cache_config_info (num_gpu_blocks × block_size)
// or SGLang's num_used_tokens ÷ token_usage, else prefix.capacity_tokens. At every scrape the index drops the hashes
// that aged out, so its size is what it presumes the node holds (at most
// 65,536 hashes a node, pruned oldest first).
//
// The model corrects itself against the engine's measured prefix-cache hit
// rate (vLLM's prefix_cache_hits_total over prefix_cache_queries_total,
// SGLang's cache_hit_rate gauge):
// at each scrape with new queries, once at least 1,024 estimated tokens
// were routed since the last correction, the share of those tokens the
// index presumed held is compared with the engine's hit rate over the
// interval, and the effective capacity is the published one times a scale
// multiplied by exp(measured − predicted), kept within [0.25, 4]. A model
// that presumes too much (traffic from other gateways, output tokens, a
// tokenizer that counts more tokens than 4 bytes each) shrinks; one that
// presumes too little grows. /admin/nodes shows each node's prefix_index:
// blocks, capacity, effective capacity, scale and the last predicted and
// measured hit rates.
//
// The prefix component is the estimated tokens of the longest unbroken run
// of leading hashes the node holds, over the request's tokens: a hit counts
// as vLLM and llm-d count one, from the first block on.
//
// Load guard, after SGLang's cache-aware policy and its balance
// thresholds: a node's load is its running plus waiting requests (as for
// the queue component). When a node's load exceeds the least loaded
// candidate's by more than prefix.balance_abs AND is more than
// prefix.balance_rel times it, its prefix component is 0, so load decides:
// a prefix never piles requests onto one node. With the defaults (3, 1.5)
// a node with 12 requests loses its prefix credit against one with 6, and
// 4 against 0, but not 7 against 5 (the gap is 2), nor 9 against 6 (9 is
// not more than 1.5 × 6).
//
// # Stickiness
//
// A conversation is keyed by the hash of its prompt up to the end of its
// first user message, which every later turn repeats. The pool remembers
// the node of each conversation's last turn (65,536 conversations, the
// least recently used forgotten first). While that node is a candidate
// and is not loaded past the load guard's margin below (balance_abs and
// balance_rel), the conversation's next turn goes there, whatever the other
// scores say: another node holding the same system prompt scores almost
// as well on prefix and may look better on memory or latency, but lacks
// the conversation's history. Past the margin (or full, down, failed) the
// turn is scored like any other, and the node it goes to becomes the
// conversation's node: it moves once and stays. New conversations are
// placed by score, which is what keeps the load balanced.
// frontdoor_balancer_sessions_total{outcome} counts turns that were new,
// stayed or moved; /status has the same under sessions.
//
// Unknown is scored as neutral, never as idle: an unknown memory or latency
// component scores 0.5 against 1 for a known-idle node or the fastest one;
// an unknown queue scores half of what the gateway's own in-flight count
// alone would give (0.5 for an idle node). So a node that stopped reporting
// keeps some traffic but loses to a node known to be idle.
//
// Policies round_robin (rotating start) and least_inflight (in-flight ÷
// weight) exist for comparison; they use the same filters.
//
// # TTFT predictor
//
// Each node has a linear model of the time to the first token
// (predict.go), for the router's spillover.max_predicted_ttft. Its
// features, taken by PredictTTFT when a request is routed (before the slot
// and Routed):
//
//	1         the intercept
//	waiting   the engine's waiting requests, and
//	running   its running requests: the last fresh scrape corrected by the
//	          change in our in-flight count since, split as for the queue
//	          component; without one, running = our in-flight, waiting 0
//	kv        KV-cache usage 0..1 (unknown: 0.5)
//	tokens    the prompt tokens the node likely does not hold, in
//	          thousands: Prefix.Tokens minus the prefix index's match, or
//	          Hints.PromptTokens (bytes ÷ 4) when the prefix hasher is off
//
// ObserveTTFT learns from a streamed answer's measured TTFT (the router
// calls it at the first byte) by recursive least squares with forgetting
// factor λ = 0.99 (an observation's weight halves after about 70 newer
// ones) from P = 10⁴·I; past a covariance trace of 10⁶ it stops forgetting,
// so a feature that never moves cannot blow the covariance up. A 5×5
// update under the node's predictor lock; predicting is a prefix lookup
// and a dot product. Predictions are clamped to >= 0.
//
// A prediction is Known once the node has 20 observations, and stops
// being known when it has had none for 10 × stale_after (like the TTFT
// average): a node avoided for its predictions then gets traffic again
// and is re-measured. Unknown never drives a decision.
//
// Exported: frontdoor_node_predicted_ttft_seconds{node} (the last
// prediction while known, else NaN), frontdoor_ttft_prediction_error_seconds
// (|predicted − measured| of known predictions), and in /admin/nodes each
// node's ttft_predictor: observations, known, the last prediction, a
// moving mean (α 0.05) of the absolute error, and the coefficients.
//
// # Ejection and breakers
//
// A node is ejected after eject.after consecutive scrapes over
// kv_usage_above or queue_above, and restored after restore_after
// consecutive scrapes clearly under them (KV usage at least 0.05 below,
// queue at most half) and never sooner than cooldown: a node hovering
// around the threshold is ejected once and stays out. A scrape without the
// metrics is no evidence either way.
//
// The breaker opens on breaker.failures failures within window, stays open
// for open_for, then lets half_open_probes trial requests through at a
// time; half_open_successes successes close it, a failure re-opens it.
//
// # Node set
//
// Update (a config reload) and discovery change the node set in place; a
// request keeps the version it picked from. An entry with discover: dns
// is a template: its host is resolved every discover_interval through a
// Discoverer (DNSDiscoverer: A and AAAA records, the system's resolver or
// dns_resolver) and each address becomes a node <name>-<address>, but
// for unspecified, multicast, cloud metadata and self addresses (the
// gateway's own, WithSelfAddrs), loopback and link-local ones unless
// discover_allow names them, and those past discover_max_nodes in address
// order (so replicas agree). A failed lookup keeps the nodes found before;
// no record means no node. A node
// that leaves takes no new request (state "removed"), its requests in
// flight finish, and once idle its loops stop and its metric series go.
//
// All timing uses the pool's clock (WithClock), so tests are deterministic.
package balancer
