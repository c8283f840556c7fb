package adapters

import (
	"bytes"
	"mime/multipart"
	"testing"
	"unicode/utf8"
)

func formBody(fields ...string) ([]byte, string) {
	var b bytes.Buffer
	w := multipart.NewWriter(&b)
	for i := 0; i+1 < len(fields); i += 2 {
		_ = w.WriteField(fields[i], fields[i+1])
	}
	_ = w.Close()
	return b.Bytes(), w.FormDataContentType()
}

func TestParsePassthrough(t *testing.T) {
	form, formCT := formBody("model", "whisper", "language", "en")
	twice, twiceCT := formBody("model", "a", "model", "b")
	none, noneCT := formBody("language", "en")
	for _, tc := range []struct {
		ct, body, model string
		status          int
	}{
		{"application/json", `{"model":"m","x":1}`, "m", 0},
		{"application/json; charset=utf-8", `{"model":"m"}`, "m", 0},
		{"application/json", `{"model":"m","model":"n"}`, "", 400},
		{"application/json", `{"x":1}`, "", 400},
		{"application/json", `["model"]`, "", 400},
		{"application/json", `{"model":""}`, "", 400},
		{formCT, string(form), "whisper", 0},
		{twiceCT, string(twice), "", 400},
		{noneCT, string(none), "", 400},
		{"multipart/form-data", string(form), "", 415}, // no boundary
		{"text/plain", `{"model":"m"}`, "", 415},
	} {
		r, apiErr := ParsePassthrough([]byte(tc.ct), []byte(tc.body))
		switch {
		case tc.status != 0 && (apiErr == nil || apiErr.Status != tc.status):
			t.Errorf("%s %.30q: %v, want %d", tc.ct, tc.body, apiErr, tc.status)
		case tc.status == 0 && apiErr != nil:
			t.Errorf("%s %.30q: %v", tc.ct, tc.body, apiErr)
		case tc.status == 0 && r.Model != tc.model:
			t.Errorf("%s: model %q, want %q", tc.ct, r.Model, tc.model)
		}
		if r != nil {
			r.Release()
		}
	}
}

// FuzzParsePassthrough: no body panics the reader, and the body sent
// upstream reads back as the same model (and, multipart, the same parts):
// the node reads what the gateway routed on.
func FuzzParsePassthrough(f *testing.F) {
	form, formCT := formBody("model", "whisper", "file", "RIFF")
	f.Add([]byte(formCT), form, "other")
	f.Add([]byte("application/json"), []byte(`{"model":"m","query":"q"}`), "m")
	f.Fuzz(func(t *testing.T, ct, body []byte, model string) {
		r, apiErr := ParsePassthrough(ct, body)
		if apiErr != nil {
			if apiErr.Status < 400 || apiErr.Status > 499 {
				t.Fatalf("bad error %+v", apiErr)
			}
			return
		}
		defer r.Release()
		if r.Model == "" {
			t.Fatal("accepted without a model")
		}
		if trimmed(model) != model || model == "" || len(model) > 256 || !utf8.ValidString(model) {
			model = r.Model // a served model's name, as the config has it
		}
		parts := len(r.parts)
		out, outCT := r.UpstreamBody(model, ct)
		again, apiErr := ParsePassthrough(outCT, out)
		if apiErr != nil {
			t.Fatalf("the upstream body does not read back: %v", apiErr)
		}
		defer again.Release()
		if r.root == nil && (len(again.parts) != parts || again.Model != model) {
			t.Fatalf("multipart: %d parts naming %q, read back as %d naming %q", parts, model, len(again.parts), again.Model)
		}
		if r.root != nil && again.Model != model {
			t.Fatalf("JSON: model %q read back as %q", model, again.Model)
		}
	})
}

func trimmed(s string) string { return string(bytes.TrimSpace([]byte(s))) }
