// Package adapters speaks the wire protocols: the OpenAI request, response
// and chunk types, a fast validating request parser, the OpenAI error
// envelope, the SSE codec, and the Backend implementations that send a
// request to an engine (vLLM, SGLang, TGI or DashScope) and stream the answer
// back. It knows nothing about caching, admission or node choice.
package adapters
