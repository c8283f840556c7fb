// Package gpusim is the engine of the gpusim command: an in-process
// simulator of a self-hosted LLM inference node that speaks the
// OpenAI-compatible HTTP API the way vLLM, TGI, SGLang or Alibaba
// DashScope's compatible mode do.
//
// It owns the whole simulated node: the fasthttp server and its endpoints
// (/v1/chat/completions, /v1/completions, /v1/models, /health, /metrics),
// vLLM-style scheduling (at most MaxNumSeqs requests generate at once, the
// rest wait FIFO), simulated timing (TTFT, ITL, jitter), deterministic output
// (see ExpectedText and PromptText), fault injection (FailRate, HangRate,
// SetHealthy), per-kind error bodies and Prometheus metric names, API-key and
// requests-per-minute checks, a record of received requests for adapter
// tests, and a judge for frontdoor's verified semantic cache that answers
// judge requests yes, no or unsure from labelled pairs (Config.JudgeLabels,
// see judge.go).
//
// A request's n gives n choices (choice 0 is what n 1 says; usage counts
// them all; streamed, each token is one chunk per choice, by index). A chat
// request with tools whose tool_choice is "required" (the first tool) or
// names a function answers with one call to it, arguments
// {"text":"<the answer's words>"} and finish_reason "tool_calls"; streamed,
// the first delta names the call and the next ones carry its arguments, as
// OpenAI does. tool_choice "auto" (or none) answers with text: a simulator
// has no ground for guessing when a model would call a tool. Those answers
// carry no DashScope reasoning_content (see choices.go).
//
// The cmd/gpusim binary is a thin flag wrapper around this package; the
// frontdoor demo and other packages' tests start it in-process:
//
//	cfg := gpusim.DefaultConfig()
//	cfg.Listen = "127.0.0.1:0"
//	s, err := gpusim.New(cfg)
//	...
//	addr, err := s.Start()
//	defer s.Shutdown(context.Background())
package gpusim
