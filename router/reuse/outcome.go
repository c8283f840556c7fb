package reuse

// Result is what the cache did for a request. It is the X-Cache header,
// the result label of frontdoor_cache_requests_total, the frontdoor.cache
// trace attribute and the access log's cache field.
type Result uint8

const (
	ResultNone        Result = iota // the cache was not consulted (refused before)
	ResultHitExact                  // answered from an identical request's answer
	ResultHitSemantic               // answered from a similar question's answer
	ResultMiss                      // looked up, not found; the answer is stored
	ResultBypass                    // not looked up (Reason says why)
	ResultPartial                   // embeddings: some inputs from the cache, the others from a node
	NumResults                      // how many results there are
)

var (
	resultHeaders = [NumResults]string{"", "hit-exact", "hit-semantic", "miss", "bypass", "partial"}
	resultLabels  = [NumResults]string{"", "hit_exact", "hit_semantic", "miss", "bypass", "partial"}
	// resultHeaderBytes are resultHeaders as bytes, for SetCanonical.
	resultHeaderBytes = func() (b [NumResults][]byte) {
		for i, h := range resultHeaders {
			b[i] = []byte(h)
		}
		return b
	}()
)

// Header is the X-Cache value ("" for ResultNone: no header).
func (r Result) Header() string { return resultHeaders[r] }

// HeaderBytes is Header as bytes; the caller must not change them.
func (r Result) HeaderBytes() []byte { return resultHeaderBytes[r] }

// Label is the metric label value.
func (r Result) Label() string { return resultLabels[r] }

// Reason says why a request's cache use was not the plain one: the reason
// label of frontdoor_cache_requests_total and the frontdoor.cache.reason
// trace attribute.
type Reason uint8

const (
	ReasonNone        Reason = iota // the plain lookup and store
	ReasonOff                       // cache.backend: off
	ReasonNoStore                   // Cache-Control: no-store
	ReasonNoCache                   // Cache-Control: no-cache: stored, not looked up
	ReasonMultimodal                // images or audio, without cache_multimodal
	ReasonN                         // n > 1
	ReasonTemperature               // above eligibility.max_temperature
	ReasonBatchPrompt               // a completion with several prompts
	ReasonDisabled                  // neither exact nor semantic is on
	ReasonStoreError                // the store failed the lookup
	ReasonStoreDown                 // the store is down or its breaker open
	ReasonCoalesced                 // served from an identical request in flight
	ReasonLookupOnly                // X-Cache-Only: answered 204 on a miss
	ReasonPrevResp                  // Responses: previous_response_id continues a stored response
	ReasonServerState               // Responses: a conversation, stored prompt template or item_reference
	ReasonBackground                // Responses: background: true
	ReasonTools                     // Responses: tools, whose calls have effects
	NumReasons                      // how many reasons there are
)

var reasonLabels = [NumReasons]string{"", "off", "no_store", "no_cache", "multimodal", "n", "temperature",
	"batch_prompt", "disabled", "store_error", "store_down", "coalesced", "lookup_only",
	"previous_response_id", "server_state", "background", "tools"}

// Label is the metric label value.
func (r Reason) Label() string { return reasonLabels[r] }

// Outcome is a request's result and reason.
type Outcome struct {
	Result Result
	Reason Reason
}

// Outcomes are the outcomes a request can have; the router's
// TestCacheOutcomes makes each happen, and each has its series from the
// start.
var Outcomes = []Outcome{
	{ResultNone, ReasonNone},
	{ResultHitExact, ReasonNone},
	{ResultHitSemantic, ReasonNone},
	{ResultMiss, ReasonNone},
	{ResultPartial, ReasonNone},
	{ResultMiss, ReasonNoCache},
	{ResultMiss, ReasonCoalesced},
	{ResultMiss, ReasonLookupOnly},
	{ResultBypass, ReasonOff},
	{ResultBypass, ReasonNoStore},
	{ResultBypass, ReasonMultimodal},
	{ResultBypass, ReasonN},
	{ResultBypass, ReasonTemperature},
	{ResultBypass, ReasonBatchPrompt},
	{ResultBypass, ReasonDisabled},
	{ResultBypass, ReasonStoreError},
	{ResultBypass, ReasonStoreDown},
	{ResultBypass, ReasonPrevResp},
	{ResultBypass, ReasonServerState},
	{ResultBypass, ReasonBackground},
	{ResultBypass, ReasonTools},
}
