package adapters

import (
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strconv"

	"github.com/go-json-experiment/json/jsontext"
	"github.com/valyala/fastjson"
)

// Embedding is one vector of an embeddings answer, as float32s: what
// engines compute, and what the cache stores.
type Embedding struct {
	Vector []float32
	// Wide says how a float answer writes the numbers: as the float64
	// whose value is the float32 (0.10000000149011612, as vLLM and other
	// Python servers write them), or, false, as the shortest decimal that
	// reads back as the float32 (0.1, as Go servers write them). Either
	// way a client reads the same float64 from the node and from the
	// cache. A vector read from base64 is Wide.
	Wide bool
}

// EmbeddingsAnswer is a node's answer to an embeddings request, its
// vectors in input order (by data[].index).
type EmbeddingsAnswer struct {
	Model   string
	Vectors []Embedding
	Usage   Usage
}

// ErrEmbeddingsAnswer is an answer that is not a whole embeddings answer
// for the inputs sent.
var ErrEmbeddingsAnswer = errors.New("not an embeddings answer for the inputs sent")

// ParseEmbeddingsAnswer reads a node's 2xx answer to an embeddings request
// of n inputs: an object whose data holds exactly one embedding for each
// index from 0 to n-1, each an array of numbers or a base64 string of
// little-endian float32s, all of one length, every component a finite
// float32 (NaN, an infinity or a number past float32's range, which the
// cache would keep as an infinity, is refused: no JSON can carry it to a
// client). Its errors never quote the body.
func ParseEmbeddingsAnswer(body []byte, n int) (*EmbeddingsAnswer, error) {
	if !jsontext.Value(body).IsValid() {
		// fastjson reads NaN, inf, +1 and 01 as numbers, raw control
		// characters in strings, and the first of two "data" keys, where
		// a client's JSON.parse fails or reads the last.
		return nil, fmt.Errorf("%w: not valid JSON (%d bytes), or a key twice in an object", ErrEmbeddingsAnswer, len(body))
	}
	p := answerParsers.Get()
	defer answerParsers.Put(p)
	v, err := p.ParseBytes(body)
	if err != nil || v.Type() != fastjson.TypeObject {
		return nil, fmt.Errorf("%w: not a JSON object", ErrEmbeddingsAnswer)
	}
	data := v.GetArray("data")
	if len(data) != n {
		return nil, fmt.Errorf("%w: %d embeddings for %d inputs", ErrEmbeddingsAnswer, len(data), n)
	}
	a := &EmbeddingsAnswer{Model: string(v.GetStringBytes("model")), Vectors: make([]Embedding, n)}
	seen, dims := make([]bool, n), -1
	for _, item := range data {
		idx := item.Get("index")
		if idx == nil {
			return nil, fmt.Errorf("%w: an embedding without an index", ErrEmbeddingsAnswer)
		}
		i, err := idx.Int()
		if err != nil || i < 0 || i >= n || seen[i] {
			return nil, fmt.Errorf("%w: a missing, repeated or out of range index", ErrEmbeddingsAnswer)
		}
		seen[i] = true
		if a.Vectors[i], err = readEmbedding(item.Get("embedding")); err != nil {
			return nil, fmt.Errorf("%w: data[index %d]: %w", ErrEmbeddingsAnswer, i, err)
		}
		switch d := len(a.Vectors[i].Vector); {
		case dims < 0:
			dims = d
		case d != dims:
			return nil, fmt.Errorf("%w: vectors of %d and of %d dimensions", ErrEmbeddingsAnswer, dims, d)
		}
	}
	parseUsage(v.Get("usage"), &a.Usage)
	return a, nil
}

// Dimensions is the length of the answer's vectors (all have one length).
func (a *EmbeddingsAnswer) Dimensions() int {
	if len(a.Vectors) == 0 {
		return 0
	}
	return len(a.Vectors[0].Vector)
}

func readEmbedding(v *fastjson.Value) (Embedding, error) {
	if v == nil {
		return Embedding{}, errors.New("no embedding")
	}
	if v.Type() == fastjson.TypeString {
		raw := v.GetStringBytes()
		b := make([]byte, base64.StdEncoding.DecodedLen(len(raw)))
		m, err := base64.StdEncoding.Decode(b, raw)
		if err != nil || m%4 != 0 || m == 0 {
			return Embedding{}, errors.New("an embedding that is not base64 of float32s")
		}
		if !FiniteFloat32s(b[:m]) {
			return Embedding{}, errors.New("a component that is NaN or infinite")
		}
		return Embedding{Vector: DecodeFloat32s(b[:m]), Wide: true}, nil
	}
	nums, err := v.Array()
	if err != nil || len(nums) == 0 {
		return Embedding{}, errors.New("an embedding that is neither numbers nor base64")
	}
	e := Embedding{Vector: make([]float32, len(nums)), Wide: true}
	var raw [40]byte
	for j, x := range nums {
		if x.Type() != fastjson.TypeNumber {
			return Embedding{}, errors.New("an embedding holding something else than numbers")
		}
		// The number as written (fastjson's own parse is not exact), a
		// JSON number: the body is valid JSON.
		s := x.MarshalTo(raw[:0])
		f, err := parseFloat32(s, &e.Wide)
		if err != nil {
			return Embedding{}, err
		}
		e.Vector[j] = f
	}
	return e, nil
}

// parseFloat32 reads a JSON number as the float32 it stands for; one past
// float32's range is an error. While *wide holds, every number so far was
// the exact float64 value of a float32; the first that is not clears it.
func parseFloat32(s []byte, wide *bool) (float32, error) {
	if *wide {
		f, err := strconv.ParseFloat(bytesString(s), 64)
		if err != nil || math.IsInf(f, 0) || math.IsNaN(f) {
			return 0, errors.New("a number out of range")
		}
		if f32 := float32(f); float64(f32) == f {
			return f32, nil
		}
		*wide = false
	}
	f, err := strconv.ParseFloat(bytesString(s), 32)
	if err != nil || math.IsInf(f, 0) || math.IsNaN(f) {
		return 0, errors.New("a number out of float32 range")
	}
	return float32(f), nil
}

// FiniteFloat32s reports whether b, little-endian float32s, holds no NaN
// and no infinity (a cached vector written before they were refused).
func FiniteFloat32s(b []byte) bool {
	const exponent = 0x7f800000 // all ones: an infinity or a NaN
	for i := 0; i+4 <= len(b); i += 4 {
		if binary.LittleEndian.Uint32(b[i:])&exponent == exponent {
			return false
		}
	}
	return true
}

// DecodeFloat32s reads little-endian float32s.
func DecodeFloat32s(b []byte) []float32 {
	v := make([]float32, len(b)/4)
	for i := range v {
		v[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return v
}

// EncodeFloat32s writes v as little-endian float32s: base64's payload, and
// the cache's.
func EncodeFloat32s(v []float32) []byte {
	b := make([]byte, 4*len(v))
	for i, f := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(f))
	}
	return b
}

// AppendEmbeddingsJSON renders an embeddings answer: vectors in order,
// data[i].index = i, as numbers or (asBase64) base64 strings, and usage
// (with prompt_tokens_details.cached_tokens, which OpenAI's embeddings
// usage lacks and the SDKs read as an extra field).
func AppendEmbeddingsJSON(dst []byte, model string, vectors []Embedding, asBase64 bool, usage Usage) []byte {
	dst = append(dst, `{"object":"list","data":[`...)
	for i, e := range vectors {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, `{"object":"embedding","index":`...)
		dst = strconv.AppendInt(dst, int64(i), 10)
		dst = append(dst, `,"embedding":`...)
		if asBase64 {
			dst = append(dst, '"')
			dst = base64.StdEncoding.AppendEncode(dst, EncodeFloat32s(e.Vector))
			dst = append(dst, '"', '}')
			continue
		}
		dst = append(dst, '[')
		for j, f := range e.Vector {
			if j > 0 {
				dst = append(dst, ',')
			}
			if e.Wide {
				dst = AppendJSONFloat(dst, float64(f), 64)
			} else {
				dst = AppendJSONFloat(dst, float64(f), 32)
			}
		}
		dst = append(dst, ']', '}')
	}
	dst = append(dst, `],"model":`...)
	dst = AppendJSONString(dst, model)
	dst = append(dst, `,"usage":{"prompt_tokens":`...)
	dst = strconv.AppendInt(dst, int64(usage.PromptTokens), 10)
	dst = append(dst, `,"total_tokens":`...)
	dst = strconv.AppendInt(dst, int64(usage.TotalTokens), 10)
	dst = append(dst, `,"prompt_tokens_details":{"cached_tokens":`...)
	dst = strconv.AppendInt(dst, int64(usage.CachedTokens), 10)
	return append(dst, "}}}"...)
}
