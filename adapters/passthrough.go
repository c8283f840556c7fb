package adapters

import (
	"bytes"
	"errors"
	"io"
	"mime"
	"mime/multipart"
	"net/textproto"
	"strings"
	"unicode/utf8"

	"github.com/valyala/fastjson"
)

// MaxMultipartParts bounds the parts of a pass-through multipart body.
const MaxMultipartParts = 256

// PassthroughRequest is a request to a pass-through path (/v1/rerank,
// /v1/audio/transcriptions, ...): the model it names, which picks the
// node, and the body to forward. A JSON body is read as strictly as a
// chat request's (I-JSON); a multipart/form-data body is read once and
// written again from what was read, so that the node reads the same model
// (and the same parts) as the gateway, whatever its own multipart parser
// would have made of the client's bytes.
type PassthroughRequest struct {
	Model string
	Body  []byte // the client's body (JSON), as received

	parsedBody            // JSON
	parts      []formPart // multipart/form-data
}

type formPart struct {
	header textproto.MIMEHeader
	data   []byte
}

// ParsePassthrough reads a pass-through request's body of the given
// content type: application/json with a model field, or
// multipart/form-data with exactly one model field. Other content types
// are a 415.
func ParsePassthrough(contentType, body []byte) (*PassthroughRequest, *APIError) {
	return ParsePassthroughWith(contentType, body, ParseOptions{})
}

// ParsePassthroughWith is ParsePassthrough with a JSON body's parse
// admitted by opt.Gate (a pass-through body has no bounded arrays).
func ParsePassthroughWith(contentType, body []byte, opt ParseOptions) (*PassthroughRequest, *APIError) {
	mt, params, err := mime.ParseMediaType(string(contentType))
	switch {
	case err == nil && mt == "application/json":
		return parsePassthroughJSON(body, opt)
	case err == nil && mt == "multipart/form-data" && params["boundary"] != "":
		return parsePassthroughForm(body, params["boundary"])
	}
	return nil, &APIError{Status: 415, Type: TypeInvalidRequest, Code: "unsupported_media_type",
		Message: "a pass-through request's Content-Type must be application/json or multipart/form-data (with a boundary)"}
}

func parsePassthroughJSON(body []byte, opt ParseOptions) (*PassthroughRequest, *APIError) {
	pb, apiErr := parseBody(EndpointPassthrough, body, opt)
	if apiErr != nil {
		return nil, apiErr
	}
	r := &PassthroughRequest{parsedBody: pb, Body: body}
	root := pb.root
	m := root.Get("model")
	if root.Type() != fastjson.TypeObject || m == nil {
		r.Release()
		return nil, BadRequest("model", "you must provide a model parameter: it picks the node")
	}
	if r.Model, apiErr = modelName(m); apiErr != nil {
		r.Release()
		return nil, apiErr
	}
	return r, nil
}

func parsePassthroughForm(body []byte, boundary string) (*PassthroughRequest, *APIError) {
	bad := func(msg string) (*PassthroughRequest, *APIError) {
		return nil, BadRequest("", "invalid multipart/form-data body: "+msg)
	}
	r := &PassthroughRequest{}
	mr := multipart.NewReader(bytes.NewReader(body), boundary)
	models := 0
	for {
		p, err := mr.NextPart()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return bad("its parts cannot be read")
		}
		if len(r.parts) == MaxMultipartParts {
			return bad("more than 256 parts")
		}
		data, err := io.ReadAll(p)
		if err != nil {
			return bad("a part cannot be read")
		}
		if p.FormName() == "model" {
			models++
			r.Model = strings.TrimSpace(string(data))
		}
		r.parts = append(r.parts, formPart{header: p.Header, data: data})
	}
	switch {
	case models == 0:
		return nil, BadRequest("model", "you must provide a model field: it picks the node")
	case models > 1:
		return nil, BadRequest("model", "the model field appears more than once: a field may appear once")
	case r.Model == "" || !utf8.ValidString(r.Model) || len(r.Model) > 256:
		return nil, BadRequest("model", "model must be a non-empty name")
	}
	return r, nil
}

// Release returns a JSON body's parser to its pool (a small one) and the
// parse cost to its gate.
func (r *PassthroughRequest) Release() { r.release() }

// UpstreamBody is the body to send upstream naming model, and its content
// type: a JSON body as it came (re-encoded when model differs from the
// one asked for), a multipart body written again from its parts.
func (r *PassthroughRequest) UpstreamBody(model string, contentType []byte) ([]byte, []byte) {
	if r.root != nil {
		if model == r.Model {
			return r.Body, contentType
		}
		var arena fastjson.Arena
		r.root.Set("model", arena.NewString(model))
		return AppendJSONValue(make([]byte, 0, len(r.Body)+len(model)), r.root), contentType
	}
	var out bytes.Buffer
	w := multipart.NewWriter(&out)
	for _, p := range r.parts {
		data := p.data
		if formName(p.header) == "model" {
			data = []byte(model)
		}
		pw, _ := w.CreatePart(p.header) // writes to a buffer: no error
		_, _ = pw.Write(data)
	}
	_ = w.Close()
	return out.Bytes(), []byte(w.FormDataContentType())
}

// formName is a part's form field name, as multipart.Part.FormName reads it.
func formName(h textproto.MIMEHeader) string {
	d, params, err := mime.ParseMediaType(h.Get("Content-Disposition"))
	if err != nil || d != "form-data" {
		return ""
	}
	return params["name"]
}
