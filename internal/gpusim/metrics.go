package gpusim

import (
	"math"
	"strconv"
	"sync/atomic"
	"time"
)

// Histogram buckets (seconds), as in vLLM.
var (
	ttftBuckets = []float64{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5,
		0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0}
	e2eBuckets = []float64{0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0,
		30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0}
)

// histogram is a lock-free Prometheus-style histogram of durations.
type histogram struct {
	upper  []float64
	counts []atomic.Uint64 // per bucket (not cumulative); last is +Inf
	sumNs  atomic.Int64
	count  atomic.Uint64
}

func newHistogram(upper []float64) *histogram {
	return &histogram{upper: upper, counts: make([]atomic.Uint64, len(upper)+1)}
}

func (h *histogram) observe(d time.Duration) {
	sec := d.Seconds()
	i := 0
	for i < len(h.upper) && sec > h.upper[i] {
		i++
	}
	h.counts[i].Add(1)
	h.sumNs.Add(int64(d))
	h.count.Add(1)
}

// metricsWriter appends Prometheus text exposition (format 0.0.4).
type metricsWriter struct {
	b      []byte
	labels string // rendered label pairs without braces, e.g. `model_name="m"`; may be ""
}

func (w *metricsWriter) header(name, typ, help string) {
	w.b = append(w.b, "# HELP "...)
	w.b = append(w.b, name...)
	w.b = append(w.b, ' ')
	w.b = append(w.b, help...)
	w.b = append(w.b, "\n# TYPE "...)
	w.b = append(w.b, name...)
	w.b = append(w.b, ' ')
	w.b = append(w.b, typ...)
	w.b = append(w.b, '\n')
}

func (w *metricsWriter) sample(name, extraLabel string, v float64) {
	w.b = append(w.b, name...)
	if w.labels != "" || extraLabel != "" {
		w.b = append(w.b, '{')
		w.b = append(w.b, w.labels...)
		if w.labels != "" && extraLabel != "" {
			w.b = append(w.b, ',')
		}
		w.b = append(w.b, extraLabel...)
		w.b = append(w.b, '}')
	}
	w.b = append(w.b, ' ')
	w.b = appendFloat(w.b, v)
	w.b = append(w.b, '\n')
}

func (w *metricsWriter) gauge(name, help string, v float64) {
	w.header(name, "gauge", help)
	w.sample(name, "", v)
}

func (w *metricsWriter) counter(name, help string, v float64) {
	w.header(name, "counter", help)
	w.sample(name, "", v)
}

func (w *metricsWriter) histogram(name, help string, h *histogram) {
	w.header(name, "histogram", help)
	// _count is the +Inf bucket so the two always agree; _sum may lag by an
	// observation under concurrent updates, which Prometheus tolerates.
	var cum uint64
	bucket := name + "_bucket"
	for i, le := range h.upper {
		cum += h.counts[i].Load()
		w.sample(bucket, `le="`+string(appendFloat(nil, le))+`"`, float64(cum))
	}
	cum += h.counts[len(h.upper)].Load()
	w.sample(bucket, `le="+Inf"`, float64(cum))
	w.sample(name+"_sum", "", time.Duration(h.sumNs.Load()).Seconds())
	w.sample(name+"_count", "", float64(cum))
}

func appendFloat(dst []byte, v float64) []byte {
	switch {
	case math.IsInf(v, 1):
		return append(dst, "+Inf"...)
	case math.IsInf(v, -1):
		return append(dst, "-Inf"...)
	case math.IsNaN(v):
		return append(dst, "NaN"...)
	}
	return strconv.AppendFloat(dst, v, 'g', -1, 64)
}

// appendLabelValue appends v escaped for a Prometheus label value.
func appendLabelValue(dst []byte, v string) []byte {
	for i := 0; i < len(v); i++ {
		switch c := v[i]; c {
		case '\\':
			dst = append(dst, `\\`...)
		case '"':
			dst = append(dst, `\"`...)
		case '\n':
			dst = append(dst, `\n`...)
		default:
			dst = append(dst, c)
		}
	}
	return dst
}

// appendMetrics appends the server's metrics under its kind's names.
func (s *Server) appendMetrics(dst []byte) []byte {
	running := float64(s.sched.running.Load())
	waiting := float64(s.sched.waiting.Load())
	inflight := float64(max(0, s.kvTokens.Load()))
	usage := min(1, inflight/float64(s.cfg.KVCapacityTokens))
	prompt := float64(s.promptTokens.Load())
	gen := float64(s.genTokens.Load())

	w := metricsWriter{b: dst, labels: s.modelLabel}
	switch s.cfg.Kind {
	case KindTGI:
		w.labels = ""
		w.gauge("tgi_queue_size", "Number of requests waiting in the internal queue", waiting)
		w.gauge("tgi_batch_current_size", "Current batch size", running)
		w.gauge("tgi_batch_current_max_tokens", "Maximum tokens for the current batch (tokens in flight)", inflight)
		w.gauge("tgi_batch_max_total_tokens", "Maximum amount of tokens in total", float64(s.cfg.KVCapacityTokens))
		w.counter("tgi_request_count", "Total number of requests received", float64(s.received.Load()))
		w.counter("tgi_request_success", "Number of successful requests", float64(s.completed.Load()))
		w.counter("tgi_request_failure", "Number of failed requests", float64(s.failed.Load()+s.rejected.Load()))
		w.histogram("tgi_request_duration", "Request duration in seconds", s.e2e)
		w.histogram("tgi_request_time_to_first_token", "Time to first token in seconds (gpusim)", s.ttft)
	case KindSGLang:
		w.gauge("sglang:num_running_reqs", "The number of running requests.", running)
		w.gauge("sglang:num_queue_reqs", "The number of requests in the waiting queue.", waiting)
		w.gauge("sglang:token_usage", "The token usage.", usage)
		w.counter("sglang:prompt_tokens_total", "Number of prefill tokens processed.", prompt)
		w.counter("sglang:generation_tokens_total", "Number of generation tokens processed.", gen)
		w.histogram("sglang:time_to_first_token_seconds", "Histogram of time to first token in seconds.", s.ttft)
		w.histogram("sglang:e2e_request_latency_seconds", "Histogram of End-to-end request latency in seconds", s.e2e)
	default: // vllm, dashscope
		w.gauge("vllm:num_requests_running", "Number of requests in model execution batches.", running)
		w.gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.", waiting)
		w.gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", usage)
		w.counter("vllm:prompt_tokens_total", "Number of prefill tokens processed.", prompt)
		w.counter("vllm:generation_tokens_total", "Number of generation tokens processed.", gen)
		var queries, hits float64
		if s.prefix != nil {
			queries, hits = float64(s.prefix.queries.Load()), float64(s.prefix.hits.Load())
		}
		w.counter("vllm:prefix_cache_queries_total", "Prefix cache queries, in terms of number of queried tokens.", queries)
		w.counter("vllm:prefix_cache_hits_total", "Prefix cache hits, in terms of number of cached tokens.", hits)
		w.header("vllm:cache_config_info", "gauge", "Information of the LLMEngine CacheConfig")
		w.sample("vllm:cache_config_info", s.cacheConfigLabels, 1)
		w.histogram("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", s.ttft)
		w.histogram("vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.", s.e2e)
	}
	w.labels = s.modelLabel
	if s.cfg.Kind == KindTGI {
		w.labels = ""
	}
	w.counter("gpusim_embedding_requests_total", "Embeddings requests answered (gpusim).", float64(s.embeddingRequests.Load()))
	w.counter("gpusim_embedding_inputs_total", "Inputs embedded by the answered embeddings requests (gpusim).", float64(s.embeddingInputs.Load()))
	if s.cfg.JudgeLabels != nil {
		const name = "gpusim_judge_answers_total"
		w.header(name, "counter", "Judge requests answered from the judge labels, by verdict.")
		for v := verdictYes; v < numVerdicts; v++ {
			w.sample(name, `verdict="`+v.String()+`"`, float64(s.judged[v].Load()))
		}
	}
	return w.b
}
