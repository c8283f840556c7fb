package telemetry

import (
	"bytes"
	"io"
	"strings"

	"github.com/VictoriaMetrics/metrics"

	"frontdoor/internal/buildinfo"
)

// metricHelp is the # HELP text of every frontdoor_ family. The library
// writes "# HELP name" and "# TYPE name type" (metrics.ExposeMetadata);
// WriteMetrics adds these texts. A family missing here fails router's
// TestMetricsHaveHelpAndType.
var metricHelp = map[string]string{
	"frontdoor_build_info":                         "Version, VCS revision and Go version of the running binary; always 1.",
	"frontdoor_requests_total":                     "Inference requests answered, by endpoint (chat, completions, embeddings, passthrough) and HTTP status code.",
	"frontdoor_request_bodies_refused_total":       "Inference requests refused because two JSON readers could read their body differently, by reason (duplicate_key, invalid_utf8, invalid_unicode_escape).",
	"frontdoor_request_duration_seconds":           "Time from request arrival to the end of the handler (streams: to the start of the stream), by endpoint.",
	"frontdoor_retries_total":                      "Upstream attempts retried on another node, by why the previous attempt failed.",
	"frontdoor_client_aborts_total":                "Streams whose client went away before the end.",
	"frontdoor_stream_errors_total":                "Upstream streams that broke before their end.",
	"frontdoor_upstream_bad_answers_total":         "Node answers not passed on as sent, by reason: too_large (over limits.max_upstream_body_bytes; 502), malformed (cut or not a JSON completion; retried, else 502), sse_converted (an event stream for a non-streaming request, converted to JSON), invalid_embeddings (an embeddings answer with a non-finite number, vectors of mixed or wrong length, or missing, extra or duplicate items; retried, else 502; never cached).",
	"frontdoor_trace_spans_exported_total":         "Spans delivered to the OTLP receiver (tracing on only).",
	"frontdoor_trace_spans_dropped_total":          "Spans dropped, by reason: export_failed (the OTLP receiver could not take them within the export timeout, retries included), queue_full (ended while the batch queue, OTEL_BSP_MAX_QUEUE_SIZE, was full) (tracing on only).",
	"frontdoor_streams_active":                     "Streams being sent to clients now.",
	"frontdoor_transport_refusals_total":           "Requests refused at the HTTP layer with a close, by reason: framing (ambiguous length, Trailer header), trailers (fields after a chunked body), expect_too_large and expect_auth (answered instead of 100 Continue), admin_origin (the admin listener: a DNS name in Host, or a browser acting for another site).",
	"frontdoor_tokens_total":                       "Tokens of answers, by tenant, kind (prompt, completion) and source (upstream, cache).",
	"frontdoor_cache_requests_total":               "Cache outcomes of inference requests, by result (hit_exact, hit_semantic, miss, bypass, partial: an embeddings batch partly cached) and reason.",
	"frontdoor_passthrough_requests_total":         "Requests to pass-through paths, by the passthrough.paths entry they fall under.",
	"frontdoor_cache_embedding_inputs_total":       "Inputs of embeddings requests looked up in the cache, by result (hit, miss).",
	"frontdoor_cache_errors_total":                 "Cache store and embedder errors, by operation.",
	"frontdoor_cache_guard_rejections_total":       "Semantic candidates refused by a guard (numbers, negation, order, entity).",
	"frontdoor_config_reloads_total":               "Config reloads (SIGHUP or POST /admin/reload), by result: applied or refused.",
	"frontdoor_discovery_errors_total":             "Failed DNS lookups of a discover: dns node entry; the last known nodes are kept.",
	"frontdoor_discovery_nodes":                    "Nodes a discover: dns entry currently resolves to.",
	"frontdoor_discovery_dropped_total":            "Addresses a discover: dns lookup returned but did not make nodes, by reason (unspecified, multicast, self, metadata, loopback, link_local, over_cap), counted at every lookup.",
	"frontdoor_cache_semantic_skipped_total":       "Requests looked up and stored by their exact key only, by reason: query_too_long (a last user turn longer than cache.embedder.max_input_bytes).",
	"frontdoor_cache_embed_skipped_total":          "Semantic lookups skipped because the embedder failed, timed out or its breaker was open.",
	"frontdoor_cache_index_sync_errors_total":      "Failed steps of the in-process vector index's sync with Redis (backend redis without RediSearch): it misses other replicas' entries until it recovers.",
	"frontdoor_cache_verify_promote_refused_total": "Promotions of a judged near-miss to a curated answer refused, by reason: lookup_only (no upstream call), not_stored (its own answer was not stored), per_minute and max (the tenant's promote_per_minute and promote_max), unavailable (the shared count in Redis failed).",
	"frontdoor_cache_verify_total":                 "Semantic hits re-checked by the judge model, by verdict (yes: the cached answer served the question; no: a false hit; unsure; error).",
	"frontdoor_cache_verify_dropped_total":         "Audits of semantic hits and checks of near-misses dropped because the judge queue was full.",
	"frontdoor_cache_false_hit_ratio":              "Share of judged semantic hits that were wrong (no over yes+no), since start.",
	"frontdoor_cache_embedder_up":                  "1 when the embedder answered lately, 0 while it fails.",
	"frontdoor_cache_similarity":                   "Cosine similarity of the best semantic candidate of each semantic lookup that has one at or above the threshold less the grey zone less 0.1 (the near misses a threshold is tuned by).",
	"frontdoor_cache_tokens_saved_total":           "Upstream tokens (prompt + completion) not spent because the cache answered.",
	"frontdoor_cache_entries":                      "Entries in the cache store (refreshed every few seconds).",
	"frontdoor_cache_vector_entries":               "Entries with an embedding in the cache store (refreshed every few seconds).",
	"frontdoor_cache_bytes":                        "Bytes used by the cache store, as the store reports them.",
	"frontdoor_cache_lookup_seconds":               "Latency of cache store lookups, by operation (get, search).",
	"frontdoor_cache_writes_total":                 "Cache write-backs, by result (stored, failed).",
	"frontdoor_cache_writes_dropped_total":         "Cache write-backs dropped before reaching the store, by reason: the store's (queue_full, breaker_open, shutdown) or an answer unfit to store (stream_error, stream_incomplete, stream_cut, client_gone).",
	"frontdoor_cache_breaker_transitions_total":    "State changes of the cache store's read and write breakers.",
	"frontdoor_cache_backend_up":                   "1 while the cache store answers, 0 while it is bypassed.",
	"frontdoor_cache_backend_state":                "1 for the cache backend's current state (ok, degraded, bypassed).",
	"frontdoor_cache_write_queue":                  "Cache write-backs waiting in the queue.",
	"frontdoor_spillover_total":                    "Requests sent to the hosted spill-over API, by reason (saturated, failed, predicted_slo) and local model.",
	"frontdoor_spillover_inflight":                 "Requests at the hosted spill-over API now.",
	"frontdoor_spillover_skipped_total":            "Requests spill-over would have taken but not to their endpoint (reason endpoint: /v1/responses with spillover.responses false); answered 503.",
	"frontdoor_responses_by_id_total":              "GET, DELETE and cancel of /v1/responses/{id}, by result: found (sent to the node that created it, or rendered from the cache), unknown (an id not remembered for this tenant: 404), holder_gone (its node or cache entry is gone: 404).",
	"frontdoor_responses_refused_total":            "Responses requests answered 404 before any node saw them because they name state not held for the tenant, by field (previous_response_id, conversation, prompt, item_reference) and reason (unknown, other_tenant).",
	"frontdoor_responses_shared_errors_total":      "Failed reads and writes of the response id records the replicas share in Redis (cache.backend: redis), by op (put, get, del); each replica then knows only the ids it passed on.",
	"frontdoor_responses_remembered":               "Response ids remembered (responses.remember_ids), each with the node or cache entry that holds it.",
	"frontdoor_parse_budget_bytes":                 "Bytes of limits.parse_budget_bytes held now by the request bodies being parsed and served (each charged 4 bytes a body byte and 128 a JSON value until its request ends).",
	"frontdoor_parse_budget_capacity_bytes":        "The parse budget (limits.parse_budget_bytes).",
	"frontdoor_parse_budget_waits_total":           "Requests that found the parse budget full and waited (limits.parse_wait).",
	"frontdoor_parse_budget_refused_total":         "Requests refused by the parse budget, by reason: full (it stayed full for limits.parse_wait: 503), too_large (the body alone costs more than the budget: 413).",
	"frontdoor_admission_rejected_total":           "Requests refused by admission, by tenant and limit.",
	"frontdoor_admission_wait_seconds":             "Time spent waiting in admission.",
	"frontdoor_admission_fallback_total":           "Admission decisions made locally because Redis failed.",
	"frontdoor_admission_redis_up":                 "1 while admission decisions go to Redis.",
	"frontdoor_admission_cap_unavailable_total":    "Requests of tenants with max_concurrency refused because Redis, which holds the cap, did not answer.",
	"frontdoor_admission_leases_restored_total":    "Live concurrency leases found missing in Redis and added back (Redis lost data or renewals failed).",
	"frontdoor_tenant_inflight":                    "Requests in flight on this replica, by tenant.",
	"frontdoor_node_inflight":                      "Requests in flight on a node.",
	"frontdoor_node_score":                         "The picker's score of a node (lower is better).",
	"frontdoor_node_state":                         "1 for a node's current state (healthy, ejected, open, draining, ...).",
	"frontdoor_node_requests_total":                "Attempts on a node, by outcome (success, failure, canceled).",
	"frontdoor_node_ttft_seconds":                  "Time to first token of streamed answers, by node.",
	"frontdoor_node_predicted_ttft_seconds":        "The TTFT predictor's last known prediction for a node (NaN until it has enough observations).",
	"frontdoor_ttft_prediction_error_seconds":      "Absolute error of the TTFT predictor, |predicted - measured|, over streamed answers with a known prediction.",
	"frontdoor_balancer_sessions_total":            "Conversation turns routed by the prefix scorer: new (no node known), stayed (on the node of the previous turn), moved.",
}

func init() {
	// # HELP and # TYPE lines for every family, process-wide.
	metrics.ExposeMetadata(true)
}

// RegisterBuildInfo exposes frontdoor_build_info.
func RegisterBuildInfo(set *metrics.Set) {
	bi := buildinfo.Get()
	set.NewGauge(`frontdoor_build_info{version="`+promLabel(bi.Version)+`",revision="`+promLabel(bi.Revision)+
		`",goversion="`+promLabel(bi.GoVersion)+`"}`, func() float64 { return 1 })
}

var promLabelEscaper = strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`)

func promLabel(s string) string { return promLabelEscaper.Replace(s) }

// WriteMetrics writes set and the process metrics to w, each family with
// its # HELP text.
func WriteMetrics(w io.Writer, set *metrics.Set) {
	var buf bytes.Buffer
	set.WritePrometheus(&buf)
	metrics.WriteProcessMetrics(&buf)
	out := make([]byte, 0, buf.Len()+4096)
	for b := buf.Bytes(); len(b) > 0; {
		line := b
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			line, b = b[:i+1], b[i+1:]
		} else {
			b = nil
		}
		if t, ok := bytes.CutPrefix(line, []byte("# TYPE ")); ok && bytes.HasSuffix(t, []byte("_total gauge\n")) {
			// The library types its process_io_*_total counters as gauges.
			out = append(out, line[:len(line)-len("gauge\n")]...)
			out = append(out, "counter\n"...)
			continue
		}
		name, ok := bytes.CutPrefix(bytes.TrimRight(line, "\n"), []byte("# HELP "))
		if !ok || bytes.IndexByte(name, ' ') >= 0 {
			out = append(out, line...)
			continue
		}
		out = append(out, "# HELP "...)
		out = append(out, name...)
		out = append(out, ' ')
		out = append(out, helpFor(string(name))...)
		out = append(out, '\n')
	}
	_, _ = w.Write(out)
}

// HasHelp reports whether a frontdoor_ family has its help text here.
func HasHelp(family string) bool { return metricHelp[family] != "" }

func helpFor(family string) string {
	if h, ok := metricHelp[family]; ok {
		return h
	}
	switch {
	case strings.HasPrefix(family, "go_"):
		return "Go runtime metric (github.com/VictoriaMetrics/metrics)."
	case strings.HasPrefix(family, "process_"):
		return "Process metric (github.com/VictoriaMetrics/metrics)."
	}
	return "Undocumented."
}
