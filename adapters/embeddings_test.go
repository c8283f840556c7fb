package adapters

import (
	"encoding/json"
	"math"
	"strconv"
	"testing"

	"github.com/valyala/fastjson"
)

// A cached vector, written again, reads back as the same float64s the node
// sent, whichever way the node wrote its float32s: as the float64 of each
// (Python servers: 0.10000000149011612), as its shortest decimal (Go
// servers: 0.1), or as base64.
func TestEmbeddingsAnswerRoundTrip(t *testing.T) {
	vec := []float32{0.1, -0.2603319, 1e-7, 0.5, -1, 3.4028235e38, 0}
	wide, short := []byte(`[`), []byte(`[`)
	for i, f := range vec {
		if i > 0 {
			wide, short = append(wide, ','), append(short, ',')
		}
		wide = strconv.AppendFloat(wide, float64(f), 'g', -1, 64)
		short = strconv.AppendFloat(short, float64(f), 'g', -1, 32)
	}
	wide, short = append(wide, ']'), append(short, ']')
	b64, _ := json.Marshal(EncodeFloat32s(vec)) // []byte marshals as base64
	for name, emb := range map[string][]byte{"wide": wide, "short": short, "base64": b64} {
		body := []byte(`{"object":"list","model":"m","usage":{"prompt_tokens":3,"total_tokens":3},"data":[{"object":"embedding","index":0,"embedding":` + string(emb) + `}]}`)
		a, err := ParseEmbeddingsAnswer(body, 1)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		for i, f := range a.Vectors[0].Vector {
			if f != vec[i] {
				t.Fatalf("%s: component %d read as %v, want %v", name, i, f, vec[i])
			}
		}
		if a.Usage.PromptTokens != 3 || a.Model != "m" {
			t.Errorf("%s: usage %+v, model %q", name, a.Usage, a.Model)
		}
		out := AppendEmbeddingsJSON(nil, "m", a.Vectors, name == "base64", a.Usage)
		var node, again struct {
			Data []struct {
				Embedding any `json:"embedding"`
			} `json:"data"`
		}
		if err := json.Unmarshal(body, &node); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(out, &again); err != nil {
			t.Fatalf("%s: written again, not JSON: %v: %s", name, err, out)
		}
		if got, want := again.Data[0].Embedding, node.Data[0].Embedding; !sameJSON(got, want) {
			t.Errorf("%s: written again as %v, the node wrote %v", name, got, want)
		}
	}
}

func sameJSON(a, b any) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return string(x) == string(y)
}

func TestEmbeddingsAnswerRefused(t *testing.T) {
	for _, body := range []string{
		`[]`, `{"data":[]}`,
		`{"data":[{"index":0,"embedding":[1]},{"index":0,"embedding":[1]}]}`, // index twice
		`{"data":[{"index":2,"embedding":[1]},{"index":0,"embedding":[1]}]}`, // out of range
		`{"data":[{"embedding":[1]},{"index":1,"embedding":[1]}]}`,           // no index
		`{"data":[{"index":0,"embedding":[]},{"index":1,"embedding":[1]}]}`,
		`{"data":[{"index":0,"embedding":["1"]},{"index":1,"embedding":[1]}]}`,
		`{"data":[{"index":0,"embedding":[1e39]},{"index":1,"embedding":[1]}]}`, // past float32
		`{"data":[{"index":0,"embedding":"AAA="},{"index":1,"embedding":[1]}]}`, // 2 bytes
		`{"data":[{"index":0,"embedding":"!!"},{"index":1,"embedding":[1]}]}`,
		`{"data":[{"index":0,"embedding":[1]}]}`, // one for two inputs
	} {
		if _, err := ParseEmbeddingsAnswer([]byte(body), 2); err == nil {
			t.Errorf("%s: accepted", body)
		}
	}
}

// An input the node computes alone goes in a body otherwise the client's.
func TestEmbeddingsUpstreamBody(t *testing.T) {
	body := []byte(`{"input":["a","b","c"],"model":"alias","dimensions":8,"x":{"y":"\u00e9"}}`)
	r, apiErr := ParseEmbeddingsRequest(body)
	if apiErr != nil {
		t.Fatal(apiErr)
	}
	defer r.Release()
	if got := r.UpstreamBody("alias", nil); string(got) != string(body) {
		t.Errorf("every input, same model: %s", got)
	}
	want := `{"input":["c","a"],"model":"served","dimensions":8,"x":{"y":"é"}}`
	if got := r.UpstreamBody("served", []int{2, 0}); string(got) != want {
		t.Errorf("a subset: %s, want %s", got, want)
	}
	one, _ := ParseEmbeddingsRequest([]byte(`{"model":"m","input":[5,6]}`))
	defer one.Release()
	if len(one.Inputs) != 1 || one.InputTokens(0) != 2 {
		t.Fatalf("[5,6] is %d inputs of %d tokens", len(one.Inputs), one.InputTokens(0))
	}
	if got := one.UpstreamBody("m", []int{0}); string(got) != `{"model":"m","input":[[5,6]]}` {
		t.Errorf("one token input alone: %s", got)
	}
}

// FuzzParseEmbeddingsRequest: no body panics the parser; an accepted one
// has a model and 1 to MaxEmbeddingInputs inputs, each a non-empty string
// or token array, and any subset of them makes a valid body; errors make a
// valid 4xx envelope.
func FuzzParseEmbeddingsRequest(f *testing.F) {
	f.Add([]byte(`{"model":"m","input":["a","b"],"encoding_format":"base64","dimensions":8}`))
	f.Add([]byte(`{"model":"m","input":[[1,2],[3]]}`))
	f.Add([]byte(`{"model":"m","input":[1,2,3],"user":"u"}`))
	f.Add([]byte(`{"model":"m","input":"x","input":"y"}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		r, apiErr := ParseEmbeddingsRequest(body)
		if apiErr != nil {
			if apiErr.Status < 400 || apiErr.Status > 499 || apiErr.Message == "" || !json.Valid(apiErr.AppendJSON(nil)) {
				t.Fatalf("bad error %+v", apiErr)
			}
			return
		}
		defer r.Release()
		if r.Model == "" || len(r.Inputs) == 0 || len(r.Inputs) > MaxEmbeddingInputs || r.Dimensions < 0 {
			t.Fatalf("accepted request breaks invariants: %+v", r)
		}
		idx := []int{}
		for i := range r.Inputs {
			if r.InputTokens(i) == 0 || r.InputTokens(i) < 0 && r.InputText(i) == "" {
				t.Fatalf("input %d is empty", i)
			}
			if i%2 == 0 {
				idx = append(idx, i)
			}
		}
		out := r.UpstreamBody("other", idx)
		if !json.Valid(out) || fastjson.GetString(out, "model") != "other" {
			t.Fatalf("subset body: %s", out)
		}
		if n := len(fastjson.MustParseBytes(out).GetArray("input")); n != len(idx) {
			t.Fatalf("subset of %d inputs has %d", len(idx), n)
		}
	})
}

// FuzzParseEmbeddingsAnswer: no node answer panics the reader; an accepted
// one has a finite vector for each input, which writes back as valid JSON.
func FuzzParseEmbeddingsAnswer(f *testing.F) {
	f.Add([]byte(`{"data":[{"index":1,"embedding":[0.5,-1]},{"index":0,"embedding":"AACAPw=="}],"model":"m","usage":{"prompt_tokens":2,"total_tokens":2}}`), 2)
	f.Add([]byte(`{"data":[{"index":0,"embedding":[1e-45,3.4028235e38]}]}`), 1)
	f.Fuzz(func(t *testing.T, body []byte, n int) {
		if n < 0 || n > 64 {
			return
		}
		a, err := ParseEmbeddingsAnswer(body, n)
		if err != nil {
			return
		}
		if len(a.Vectors) != n {
			t.Fatalf("%d vectors for %d inputs", len(a.Vectors), n)
		}
		for _, v := range a.Vectors {
			for _, x := range v.Vector {
				if math.IsInf(float64(x), 0) || math.IsNaN(float64(x)) {
					t.Fatalf("a component %v", x)
				}
			}
		}
		for _, b64 := range []bool{false, true} {
			if out := AppendEmbeddingsJSON(nil, a.Model, a.Vectors, b64, a.Usage); !json.Valid(out) {
				t.Fatalf("written again, not JSON: %s", out)
			}
		}
	})
}
