package gpusim

import (
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"math"
	"net/http"
	"strings"
	"testing"
)

func TestEmbeddings(t *testing.T) {
	s, err := New(Config{Listen: "127.0.0.1:0", EmbeddingDims: 64, APIKey: "k"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Shutdown(t.Context()) })
	post := func(body string) (int, map[string]any) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, s.URL()+"/v1/embeddings", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer k")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out map[string]any
		_ = json.NewDecoder(resp.Body).Decode(&out)
		return resp.StatusCode, out
	}
	vec := func(out map[string]any, i int) []float64 {
		item := out["data"].([]any)[i].(map[string]any)
		if int(item["index"].(float64)) != i {
			t.Fatalf("item %d has index %v", i, item["index"])
		}
		var v []float64
		for _, x := range item["embedding"].([]any) {
			v = append(v, x.(float64))
		}
		return v
	}
	dot := func(a, b []float64) (d float64) {
		for i := range a {
			d += a[i] * b[i]
		}
		return d
	}

	code, out := post(`{"model":"bge-m3","input":["How do I sort a list?","how do i sort a list","Weather in Paris"]}`)
	if code != 200 {
		t.Fatalf("status %d: %v", code, out)
	}
	a, b, c := vec(out, 0), vec(out, 1), vec(out, 2)
	if len(a) != 64 || math.Abs(dot(a, a)-1) > 1e-4 {
		t.Fatalf("vector of %d dims with norm² %.4f, want 64 and 1", len(a), dot(a, a))
	}
	if dot(a, b) < 0.99 || dot(a, c) > 0.5 {
		t.Errorf("similarities: same question %.3f, other question %.3f", dot(a, b), dot(a, c))
	}
	usage := out["usage"].(map[string]any)
	if usage["prompt_tokens"].(float64) < 3 || usage["total_tokens"] != usage["prompt_tokens"] || out["model"] != "bge-m3" {
		t.Errorf("usage %v, model %v", usage, out["model"])
	}
	// Deterministic, and "dimensions" is honoured.
	_, again := post(`{"model":"bge-m3","input":"How do I sort a list?","dimensions":32}`)
	if v := vec(again, 0); len(v) != 32 {
		t.Errorf("dimensions 32 gave %d", len(v))
	}
	_, again = post(`{"model":"x","input":"How do I sort a list?"}`)
	if v := vec(again, 0); dot(v, a) < 0.9999 {
		t.Errorf("the same text embedded twice differs: %.5f", dot(v, a))
	}
	// Token ids are inputs too, and base64 carries the same float32s.
	code, toks := post(`{"model":"m","input":[[1,2,3],[4,5]],"dimensions":16}`)
	if code != 200 || len(vec(toks, 0)) != 16 || len(vec(toks, 1)) != 16 || toks["usage"].(map[string]any)["prompt_tokens"].(float64) != 5 {
		t.Fatalf("token inputs: %d %v", code, toks)
	}
	_, one := post(`{"model":"m","input":[1,2,3],"dimensions":16}`)
	if d := dot(vec(one, 0), vec(toks, 0)); math.Abs(d-1) > 1e-6 {
		t.Errorf("[1,2,3] alone and in a batch differ: %.6f", d)
	}
	_, b64 := post(`{"model":"m","input":[1,2,3],"dimensions":16,"encoding_format":"base64"}`)
	raw, err := base64.StdEncoding.DecodeString(b64["data"].([]any)[0].(map[string]any)["embedding"].(string))
	if err != nil || len(raw) != 64 {
		t.Fatalf("base64: %v, %d bytes", err, len(raw))
	}
	for k, f := range vec(one, 0) {
		if got := math.Float32frombits(binary.LittleEndian.Uint32(raw[4*k:])); got != float32(f) {
			t.Fatalf("base64 component %d is %v, the float answer says %v", k, got, f)
		}
	}
	before := s.Stats()
	post(`{"model":"m","input":["a","b","c"]}`)
	if st := s.Stats(); st.EmbeddingInputs-before.EmbeddingInputs != 3 || st.EmbeddingRequests-before.EmbeddingRequests != 1 {
		t.Errorf("counters rose by %d inputs in %d requests, want 3 in 1", st.EmbeddingInputs-before.EmbeddingInputs, st.EmbeddingRequests-before.EmbeddingRequests)
	}
	for _, bad := range []string{`{}`, `{"input":[]}`, `{"input":[true]}`, `{"input":[-1]}`, `{"input":[[]]}`, `{"input":""}`,
		`{"input":"x","encoding_format":"hex"}`, `{"input":"x","dimensions":2}`, `[1]`} {
		if code, _ := post(bad); code != 400 {
			t.Errorf("%s: status %d, want 400", bad, code)
		}
	}
	s.SetFailRate(1)
	if code, _ := post(`{"input":"x"}`); code != 500 {
		t.Errorf("fail rate 1: status %d, want 500", code)
	}
}
