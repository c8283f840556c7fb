// Package adapters speaks the wire protocols: the OpenAI request, response
// and chunk types, a fast validating request parser, the OpenAI error
// envelope, the SSE codec, and the Backend implementations that send a
// request to an engine (vLLM, SGLang, TGI or DashScope) and stream the answer
// back. It also owns the two transports: LoopServer, epoll event loops that
// serve whole hot-path requests and talk HTTP/1.1 to upstreams without a
// goroutine per connection (LoopExchange.Send), batching each turn's
// socket reads and writes through io_uring where the kernel allows it
// (ioBatch), and handing every other connection to a fallback server; and
// DeferredConn, which sends a request
// (or a whole answer) from inside the read that follows it, for the
// goroutine-per-connection side. It knows nothing about caching, admission
// or node choice.
package adapters
