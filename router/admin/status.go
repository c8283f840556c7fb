package admin

import (
	"frontdoor/admission"
	"frontdoor/balancer"
	"frontdoor/cache"
	"frontdoor/internal/telemetry"
	"frontdoor/internal/warm"
	"time"
)

// Status is the GET /status document.
type Status struct {
	Uptime   string         `json:"uptime"`
	Ready    bool           `json:"ready"`
	Version  string         `json:"version"`
	Revision string         `json:"revision,omitempty"`
	Requests map[string]int `json:"requests"` // by outcome class
	// Outcomes counts answers since start: hit (from the cache), local (a
	// node), spilled (the hosted API), rejected (429 or 503).
	Outcomes map[string]int64 `json:"outcomes"`
	// TTFT is over the streamed answers of local nodes in the last minute.
	TTFT    TTFTStatus            `json:"ttft"`
	Streams int64                 `json:"streams_active"`
	Cache   *CacheStatus          `json:"cache,omitempty"`
	Spill   *SpillStatus          `json:"spillover,omitempty"`
	Nodes   []balancer.NodeStatus `json:"nodes"`
	// Sessions are the conversations the prefix scorer keeps on their
	// nodes (absent with the prefix weight 0).
	Sessions  *balancer.SessionStatus `json:"sessions,omitempty"`
	Admission admission.Status        `json:"admission"`
	// Discovery lists the discover: dns entries: addresses found, and the
	// last lookup's error while lookups fail.
	Discovery []balancer.DiscoveryStatus `json:"discovery,omitempty"`
	Reload    *ReloadStatus              `json:"last_reload,omitempty"`
	Draining  bool                       `json:"draining"`       // shutting down: /readyz says 503
	Warm      []warm.JobStatus           `json:"warm,omitempty"` // warm-ups, running and recent (failures left out)
	// Tracing is the OTLP exporter's delivery (absent with tracing off).
	Tracing *telemetry.TracingStatus `json:"tracing,omitempty"`
}

// TTFTStatus is the time to first token of recent streamed answers.
type TTFTStatus struct {
	P50     float64 `json:"p50_seconds"`
	P95     float64 `json:"p95_seconds"`
	Samples int     `json:"samples"`
}

// CacheStatus is the cache part of /status.
type CacheStatus struct {
	Backend  string           `json:"backend"`
	Results  map[string]int64 `json:"results"`
	HitRatio float64          `json:"hit_ratio"`
	Entries  int64            `json:"entries"`
	Vectors  int64            `json:"vector_entries"`
	Bytes    int64            `json:"bytes"`
	Saved    uint64           `json:"tokens_saved"`
	// The store's health: state (ok, degraded, bypassed) and since when, up,
	// why, both breakers and the write-back queue.
	cache.Health
	Dropped  uint64                `json:"writes_dropped"`
	Embedder *cache.EmbedderHealth `json:"embedder,omitempty"`
	// IndexSync is the in-process vector index's sync with Redis
	// (backend redis without RediSearch).
	IndexSync *cache.IndexSyncHealth `json:"index_sync,omitempty"`
	Verify    *VerifyStatus          `json:"verify,omitempty"`
}

// SpillStatus is the spill-over part of /status.
type SpillStatus struct {
	Upstream string  `json:"upstream"`
	Inflight int64   `json:"inflight"`
	Spilled  int64   `json:"spilled"`
	Ratio    float64 `json:"ratio"` // spilled / upstream answers
	// ByReason counts spilled requests by reason: saturated, failed,
	// predicted_slo (the TTFT predictor expected every free node to
	// miss spillover.max_predicted_ttft).
	ByReason map[string]int64 `json:"by_reason"`
	// MaxPredictedTTFT is spillover.max_predicted_ttft in seconds (0:
	// off; tenants and models may set their own), and LastPredictedSLO
	// when a request last spilled for it.
	MaxPredictedTTFT float64    `json:"max_predicted_ttft_seconds"`
	LastPredictedSLO *time.Time `json:"last_predicted_slo,omitempty"`
}

// ReloadStatus is the last reload, as /status shows it.
type ReloadStatus struct {
	At    time.Time `json:"at"`
	Error string    `json:"error,omitempty"`
}

// VerifyStatus is the judge's audit of semantic hits: the false-hit rate
// with its 95% interval, overall and per tenant and model.
type VerifyStatus struct {
	JudgeModel   string         `json:"judge_model"`
	AuditRate    float64        `json:"audit_rate"`
	FalseHitRate cache.Interval `json:"false_hit_rate"`
	// Unsure counts the audited hits the judge could not decide: they
	// are in no rate (FalseHitRate counts yes and no).
	Unsure        uint64                 `json:"unsure"`
	Scopes        []cache.ScopedInterval `json:"scopes,omitempty"`
	State         string                 `json:"state"` // ok | failing
	Calls         int64                  `json:"judge_calls"`
	Failures      int64                  `json:"judge_failures"`
	LastError     string                 `json:"last_error,omitempty"`
	Queued        int                    `json:"queued"`
	DroppedAudits uint64                 `json:"dropped_audits"`
	Promoted      uint64                 `json:"promoted"` // approved near-misses stored with a curated answer
	Thresholds    []VerifyThreshold      `json:"thresholds,omitempty"`
	// PromoteRefused counts approved near-misses not promoted, by reason:
	// lookup_only, not_stored, per_minute, max, unavailable.
	PromoteRefused map[string]uint64 `json:"promote_refused,omitempty"`
}

// VerifyThreshold is a tenant and model's semantic threshold as the judged
// evidence has moved it (0: not moved, the configured one applies) and how
// many judged candidates it rests on.
type VerifyThreshold struct {
	Tenant    string  `json:"tenant"`
	Model     string  `json:"model"`
	Threshold float64 `json:"threshold,omitempty"`
	Samples   int     `json:"samples"`
}
