package router

import "github.com/valyala/fasthttp"

// cacheResult is what the cache did for a request. It is the X-Cache
// header, the result label of frontdoor_cache_requests_total, the
// frontdoor.cache trace attribute and the access log's cache field.
type cacheResult uint8

const (
	resultNone        cacheResult = iota // the cache was not consulted (refused before)
	resultHitExact                       // answered from an identical request's answer
	resultHitSemantic                    // answered from a similar question's answer
	resultMiss                           // looked up, not found; the answer is stored
	resultBypass                         // not looked up (cacheReason says why)
	resultPartial                        // embeddings: some inputs from the cache, the others from a node
	numResults
)

var (
	resultHeaders = [numResults]string{"", "hit-exact", "hit-semantic", "miss", "bypass", "partial"}
	resultLabels  = [numResults]string{"", "hit_exact", "hit_semantic", "miss", "bypass", "partial"}
)

// resultHeaderBytes are resultHeaders as bytes, for SetCanonical.
var resultHeaderBytes = func() (b [numResults][]byte) {
	for i, h := range resultHeaders {
		b[i] = []byte(h)
	}
	return b
}()

// header is the X-Cache value ("" for resultNone: no header).
func (r cacheResult) header() string { return resultHeaders[r] }

// label is the metric label value.
func (r cacheResult) label() string { return resultLabels[r] }

// cacheReason says why a request's cache use was not the plain one: the
// reason label of frontdoor_cache_requests_total and the
// frontdoor.cache.reason trace attribute.
type cacheReason uint8

const (
	reasonNone        cacheReason = iota // the plain lookup and store
	reasonOff                            // cache.backend: off
	reasonNoStore                        // Cache-Control: no-store
	reasonNoCache                        // Cache-Control: no-cache: stored, not looked up
	reasonMultimodal                     // images or audio, without cache_multimodal
	reasonN                              // n > 1
	reasonTemperature                    // above eligibility.max_temperature
	reasonBatchPrompt                    // a completion with several prompts
	reasonDisabled                       // neither exact nor semantic is on
	reasonStoreError                     // the store failed the lookup
	reasonStoreDown                      // the store is down or its breaker open
	reasonCoalesced                      // served from an identical request in flight
	reasonLookupOnly                     // X-Cache-Only: answered 204 on a miss
	reasonPrevResp                       // Responses: previous_response_id continues a stored response
	reasonServerState                    // Responses: a conversation, stored prompt template or item_reference
	reasonBackground                     // Responses: background: true
	reasonTools                          // Responses: tools, whose calls have effects
	numReasons
)

var reasonLabels = [numReasons]string{"", "off", "no_store", "no_cache", "multimodal", "n", "temperature",
	"batch_prompt", "disabled", "store_error", "store_down", "coalesced", "lookup_only",
	"previous_response_id", "server_state", "background", "tools"}

func (r cacheReason) label() string { return reasonLabels[r] }

// cacheOutcome is a request's result and reason.
type cacheOutcome struct {
	result cacheResult
	reason cacheReason
}

// headerCacheEntry names the entry that answered, or that will hold the
// answer of a miss.
var headerCacheEntry = []byte("X-Cache-Entry")

// setCache records what the cache did for x, and the response headers
// that say it: X-Cache, and X-Cache-Entry when entry is not "". The
// metric and the trace take the outcome from x when the request ends
// (finish), so the three always agree.
func (x *exchange) setCache(h *fasthttp.ResponseHeader, o cacheOutcome, entry string) {
	x.cache = o
	if o.result != resultNone {
		h.SetCanonical(headerCache, resultHeaderBytes[o.result])
	}
	if entry != "" {
		x.entryID = entry
		h.SetCanonical(headerCacheEntry, []byte(entry))
	}
}

// setCacheEntry names the entry that will hold x's answer.
func (x *exchange) setCacheEntry(h *fasthttp.ResponseHeader, entry string) {
	x.setCache(h, x.cache, entry)
}

// cacheOutcomes are the outcomes a request can have; TestCacheOutcomes
// makes each happen.
var cacheOutcomes = []cacheOutcome{
	{resultNone, reasonNone},
	{resultHitExact, reasonNone},
	{resultHitSemantic, reasonNone},
	{resultMiss, reasonNone},
	{resultPartial, reasonNone},
	{resultMiss, reasonNoCache},
	{resultMiss, reasonCoalesced},
	{resultMiss, reasonLookupOnly},
	{resultBypass, reasonOff},
	{resultBypass, reasonNoStore},
	{resultBypass, reasonMultimodal},
	{resultBypass, reasonN},
	{resultBypass, reasonTemperature},
	{resultBypass, reasonBatchPrompt},
	{resultBypass, reasonDisabled},
	{resultBypass, reasonStoreError},
	{resultBypass, reasonStoreDown},
	{resultBypass, reasonPrevResp},
	{resultBypass, reasonServerState},
	{resultBypass, reasonBackground},
	{resultBypass, reasonTools},
}
