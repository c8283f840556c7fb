package cache

import (
	"crypto/sha256"
	"encoding/hex"

	"github.com/valyala/fastjson"
)

// embeddingSkipped are the fields of an embeddings request that are not
// part of its inputs' keys, besides those of no request (stream, user...):
// the input, keyed one by one, and encoding_format, which only says how
// the stored float32s are written.
var embeddingSkipped = map[string]bool{"input": true, "encoding_format": true}

// EmbeddingKeys returns the exact key of each input of an embeddings
// request: a hash of the namespace, the model (after alias resolution),
// every field of the request that changes a vector (dimensions, and any
// field an engine adds, such as truncate_prompt_tokens) and the input
// itself, a string or an array of token ids ("12" and [12] differ). Two
// requests share an input's entry only within one namespace and when
// nothing else differs; a key never equals a chat or completion key.
// root is the request's JSON object (no duplicate keys), inputs its inputs
// in order.
func EmbeddingKeys(namespace, model string, root *fastjson.Value, inputs []*fastjson.Value, opt KeyOptions) []string {
	obj, err := root.Object()
	if err != nil {
		return nil
	}
	bp := bufPool.Get().(*[]byte)
	b := (*bp)[:0]
	b = append(b, "frontdoor-embedding-v1\x00"...)
	b = appendStr(b, namespace)
	b = appendStr(b, EndpointEmbeddings)
	b = appendStr(b, model)
	b = appendTopLevel(b, obj, EndpointEmbeddings, -1, opt, embeddingSkipped)
	common := len(b)
	keys := make([]string, len(inputs))
	for i, in := range inputs {
		b = appendValue(b[:common], in)
		sum := sha256.Sum256(b)
		keys[i] = hex.EncodeToString(sum[:16])
	}
	*bp = b
	putBuf(bp)
	return keys
}
