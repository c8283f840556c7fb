// Package embed owns turning text into vectors for the semantic cache.
//
// An Embedder maps a prompt to an L2-normalised []float32 of fixed length, so
// that the cosine similarity of two prompts is a plain dot product (Cosine).
// Two implementations ship:
//
//   - Local: feature hashing of tokenizer tokens and character n-grams. No
//     network, deterministic, tens of microseconds per prompt, multilingual,
//     but lexical: it sees rewording, reordering, case, punctuation and small
//     edits, not synonyms.
//   - OpenAI: any OpenAI-compatible /v1/embeddings endpoint (vLLM, TEI,
//     Ollama, DashScope, ...), with request batching, a memo of recent texts
//     and a short circuit breaker so a dead endpoint fails fast.
//
// New builds the one a Config asks for. Which vector answers which prompt,
// thresholds and false-hit guards belong to package cache, not here.
package embed
