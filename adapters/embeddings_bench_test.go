package adapters

import (
	"math/rand/v2"
	"strconv"
	"testing"
)

// BenchmarkParseEmbeddingsAnswer reads (and checks) a vLLM-style answer of
// 32 vectors of 1024 float32s, each written as its float64.
func BenchmarkParseEmbeddingsAnswer(b *testing.B) {
	body := []byte(`{"object":"list","data":[`)
	for i := range 32 {
		if i > 0 {
			body = append(body, ',')
		}
		body = append(body, `{"object":"embedding","index":`...)
		body = strconv.AppendInt(body, int64(i), 10)
		body = append(body, `,"embedding":[`...)
		for j := range 1024 {
			if j > 0 {
				body = append(body, ',')
			}
			body = strconv.AppendFloat(body, float64(float32(rand.NormFloat64()/32)), 'g', -1, 64)
		}
		body = append(body, "]}"...)
	}
	body = append(body, `],"model":"m","usage":{"prompt_tokens":64,"total_tokens":64}}`...)
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		if _, err := ParseEmbeddingsAnswer(body, 32); err != nil {
			b.Fatal(err)
		}
	}
}
