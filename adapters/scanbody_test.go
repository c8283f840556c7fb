package adapters

import (
	"bytes"
	"io"
	"strconv"
	"strings"
	"testing"

	"github.com/go-json-experiment/json/jsontext"
	"github.com/valyala/fastjson"
)

// scanLimits are small bounds, so that bodies at and over them are short.
// An embeddings request's input array is bounded by MaxEmbeddingInputs
// (2048) in the scan when MaxTokenIDs is smaller.
var scanLimits = BodyLimits{MaxMessages: 3, MaxContentParts: 2, MaxTokenIDs: 4}

var scanEndpoints = []Endpoint{EndpointChat, EndpointCompletion, EndpointResponses, EndpointEmbeddings}

// validateWithoutScan parses body with a plain fastjson.Parser, without
// scanBody, and runs the validation ep's request runs after its parse,
// within lim.
func validateWithoutScan(ep Endpoint, body []byte, lim BodyLimits) *APIError {
	var p fastjson.Parser
	root, err := p.ParseBytes(body)
	if err != nil {
		return BadRequest("", "invalid JSON body: "+err.Error())
	}
	pb := parsedBody{root: root} // no parser: nothing to give back
	if ep == EndpointEmbeddings {
		return (&EmbeddingsRequest{parsedBody: pb, lim: lim.orDefaults()}).validate()
	}
	return (&Request{Endpoint: ep, parsedBody: pb, lim: lim.orDefaults(), N: 1}).validate()
}

// parseWith is the full parse of body for ep (I-JSON check, scanBody,
// parse, validation), its request released.
func parseWith(ep Endpoint, body []byte, lim BodyLimits) *APIError {
	opt := ParseOptions{Limits: lim}
	if ep == EndpointEmbeddings {
		r, e := ParseEmbeddingsRequestWith(body, opt)
		if e == nil {
			r.Release()
		}
		return e
	}
	r, e := ParseRequestWith(ep, body, opt)
	if e == nil {
		r.Release()
	}
	return e
}

// isTooMany reports whether e is tooMany's error for its param.
func isTooMany(e *APIError) bool {
	if e == nil || e.Param == "" {
		return false
	}
	n, ok := strings.CutPrefix(e.Message, e.Param+" holds more than ")
	if !ok {
		return false
	}
	n, ok = strings.CutSuffix(n, " items, the most this gateway accepts")
	if !ok {
		return false
	}
	max, err := strconv.Atoi(n)
	return err == nil && *e == *tooMany(e.Param, max)
}

// countValues counts the values and object members of a valid body, as
// bodyShape.values does: every token but the ends of objects and arrays.
func countValues(t *testing.T, body []byte) int {
	d := jsontext.NewDecoder(bytes.NewReader(body))
	n := 0
	for {
		tok, err := d.ReadToken()
		if err == io.EOF {
			return n
		}
		if err != nil {
			t.Fatalf("valid body %q: %v", body, err)
		}
		if k := tok.Kind(); k != '}' && k != ']' {
			n++
		}
	}
}

// checkScanAgrees checks scanBody against the validation that runs after
// the parse, for a body that is valid JSON, and returns scanBody's verdict.
func checkScanAgrees(t *testing.T, ep Endpoint, body []byte, lim BodyLimits) *APIError {
	t.Helper()
	shape, scanErr := scanBody(ep, body, lim.orDefaults()) // A: no panic
	if scanErr == nil && shape.values != countValues(t, body) {
		t.Fatalf("endpoint %d: scanBody counted %d values, the body holds %d: %q", ep, shape.values, countValues(t, body), body)
	}
	if len(bytes.TrimSpace(body)) > 0 && shape.values < 1 {
		t.Fatalf("endpoint %d: scanBody counted %d values in %q", ep, shape.values, body)
	}
	if scanErr != nil && !isTooMany(scanErr) {
		t.Fatalf("endpoint %d: scanBody refused %q with %+v, not a bound's error", ep, body, scanErr)
	}
	valErr := validateWithoutScan(ep, body, lim)
	// B: no false refusal. A body scanBody refuses, validation refuses too.
	if scanErr != nil && valErr == nil {
		t.Fatalf("endpoint %d: scanBody refused %q (%s) but validation accepts it", ep, body, scanErr.Message)
	}
	parseErr := parseWith(ep, body, lim)
	// C: no miss that matters. Over a bound by validation, the full parse refuses.
	if isTooMany(valErr) && parseErr == nil {
		t.Fatalf("endpoint %d: validation refused %q (%s) but the parse accepts it", ep, body, valErr.Message)
	}
	// Past the scan, the full parse is the validation.
	if scanErr == nil && (parseErr == nil) != (valErr == nil) {
		t.Fatalf("endpoint %d: %q: parse says %v, validation without the scan %v", ep, body, parseErr, valErr)
	}
	if scanErr != nil && (parseErr == nil || *parseErr != *scanErr) {
		t.Fatalf("endpoint %d: %q: parse says %v, scanBody %v", ep, body, parseErr, scanErr)
	}
	return scanErr
}

// Pieces of the framing cases.
func repeatJSON(n int, item string) string {
	return "[" + strings.TrimSuffix(strings.Repeat(item+",", n), ",") + "]"
}

func msgs(n int) string  { return repeatJSON(n, `{"role":"user","content":"hi"}`) }
func parts(n int) string { return repeatJSON(n, `{"type":"text","text":"a"}`) }
func iparts(n int) string {
	return repeatJSON(n, `{"type":"input_text","text":"a"}`)
}
func ids(n int) string  { return repeatJSON(n, `7`) }
func strs(n int) string { return repeatJSON(n, `"s"`) }

// nest10 wraps inner in objects 10 deep under key.
func nest10(key, inner string) string {
	return `"` + key + `":` + strings.Repeat(`{"a":`, 9) + inner + strings.Repeat(`}`, 9)
}

type scanCase struct {
	name  string
	ep    Endpoint
	body  string
	scan  string // the param scanBody refuses, "" when it accepts
	parse string // the param of the full parse's error, "" when it accepts
}

var scanCases = []scanCase{
	// chat: messages and messages[i].content
	{"chat messages at bound", EndpointChat, `{"model":"m","messages":` + msgs(3) + `}`, "", ""},
	{"chat messages over bound", EndpointChat, `{"model":"m","messages":` + msgs(4) + `}`, "messages", "messages"},
	{"chat messages before model", EndpointChat, `{"messages":` + msgs(4) + `,"model":"m"}`, "messages", "messages"},
	{"chat content at bound", EndpointChat, `{"model":"m","messages":[{"role":"user","content":` + parts(2) + `}]}`, "", ""},
	{"chat content over bound", EndpointChat, `{"model":"m","messages":[{"role":"user","content":` + parts(3) + `}]}`, "messages[0].content", "messages[0].content"},
	{"chat content over bound in third message", EndpointChat,
		`{"model":"m","messages":[{"role":"system","content":"s"},{"role":"user","content":` + parts(2) + `},{"content":` + parts(3) + `,"role":"user"}]}`,
		"messages[2].content", "messages[2].content"},
	{"chat escaped messages key", EndpointChat, `{"model":"m","\u006dessages":` + msgs(4) + `}`, "", "messages"},
	{"chat escaped content key", EndpointChat, `{"model":"m","messages":[{"role":"user","\u0063ontent":` + parts(3) + `}]}`, "", "messages[0].content"},
	{"chat array in a string", EndpointChat, `{"model":"m","messages":[{"role":"user","content":"[1,2,3,4,5]"}]}`, "", ""},
	{"chat brackets quotes backslashes", EndpointChat,
		`{"model":"m","user":"a\"],[\\\"{\\","messages":[{"role":"user","content":"\\\"]}],\"messages\":[1,2,3,4,5]"}]}`, "", ""},
	{"chat string ending in backslash", EndpointChat, `{"model":"m","user":"a\\","messages":` + msgs(4) + `}`, "messages", "messages"},
	{"chat key with escaped quote", EndpointChat, `{"model":"m","mess\"ages":[1,2,3,4,5],"messages":` + msgs(1) + `}`, "", ""},
	{"chat messages in a string", EndpointChat, `{"model":"m","user":"\"messages\":[1,2,3,4,5]","messages":` + msgs(1) + `}`, "", ""},
	{"chat messages in metadata", EndpointChat, `{"model":"m","metadata":{"messages":[1,2,3,4,5]},"messages":` + msgs(1) + `}`, "", ""},
	{"chat messages 10 deep", EndpointChat, `{"model":"m",` + nest10("metadata", `{"messages":[1,2,3,4,5],"content":[[1,2,3]]}`) + `,"messages":` + msgs(1) + `}`, "", ""},
	{"chat content 10 deep in a message", EndpointChat,
		`{"model":"m","messages":[{"role":"user","content":"x",` + nest10("extra", `{"content":[1,2,3,4,5]}`) + `}]}`, "", ""},
	{"chat content in a content part", EndpointChat,
		`{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"a","content":[1,2,3,4,5]}]}]}`, "", ""},
	{"chat content of a message's object", EndpointChat,
		`{"model":"m","messages":[{"role":"user","content":"x","extra":{"content":[1,2,3]}}]}`, "", ""},
	{"chat top-level content", EndpointChat, `{"model":"m","content":[1,2,3,4,5],"messages":` + msgs(1) + `}`, "", ""},
	{"chat messages in a tool schema", EndpointChat,
		`{"model":"m","messages":` + msgs(1) + `,"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object","properties":{"messages":{"type":"array","items":{"type":"string"},"default":[1,2,3,4,5]}},"messages":[1,2,3,4,5],"content":[1,2,3]}}}]}`,
		"", ""},
	{"chat array messages", EndpointChat, `{"model":"m","messages":[[1,2,3],[4,5,6]]}`, "", "messages[0]"},
	{"chat messages of literals", EndpointChat, `{"model":"m","messages":[-1.5e+10,true,false,null]}`, "messages", "messages"},
	{"chat messages of literals at bound", EndpointChat, `{"model":"m","messages":[true,false,null]}`, "", "messages[0]"},
	{"chat numbers in content", EndpointChat, `{"model":"m","messages":[{"role":"user","content":[-1.5e+10,0,1E-3]}]}`, "messages[0].content", "messages[0].content"},
	{"chat whitespace", EndpointChat,
		" \r\n\t{ \"model\" : \"m\" ,\n\t\"messages\"\r\n:\t[ {\"role\":\"user\",\"content\":\"a\"} ,\n{\"role\":\"user\",\"content\":\"b\"}\t, {\"role\":\"user\",\"content\":\"c\"}\r\n,\n{\"role\":\"user\",\"content\":\"d\"} ] }\n ",
		"messages", "messages"},
	{"chat whitespace in content", EndpointChat,
		"{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\" :\n[ {\"type\":\"text\",\"text\":\"a\"} , \t{\"type\":\"text\",\"text\":\"b\"} ]\n}]}", "", ""},
	{"chat empty arrays", EndpointChat, `{"model":"m","messages":[{"role":"user","content":[]},{"role":"user","content":[ ]}],"stop":[]}`, "", ""},
	{"chat prompt is not bounded", EndpointChat, `{"model":"m","prompt":[1,2,3,4,5],"input":[1,2,3,4,5],"messages":` + msgs(1) + `}`, "", ""},

	// completions: prompt and prompt[i]
	{"completion prompt at bound", EndpointCompletion, `{"model":"m","prompt":` + ids(4) + `}`, "", ""},
	{"completion prompt over bound", EndpointCompletion, `{"model":"m","prompt":` + ids(5) + `}`, "prompt", "prompt"},
	{"completion strings over bound", EndpointCompletion, `{"model":"m","prompt":` + strs(5) + `}`, "prompt", "prompt"},
	{"completion token array at bound", EndpointCompletion, `{"model":"m","prompt":[` + ids(4) + `]}`, "", ""},
	{"completion token array over bound", EndpointCompletion, `{"model":"m","prompt":[` + ids(5) + `]}`, "prompt[0]", "prompt[0]"},
	{"completion second token array over bound", EndpointCompletion, `{"model":"m","prompt":["a",` + ids(5) + `]}`, "prompt[1]", "prompt[1]"},
	{"completion arrays 3 deep", EndpointCompletion, `{"model":"m","prompt":[[` + ids(5) + `]]}`, "", "prompt"},
	{"completion escaped prompt key", EndpointCompletion, `{"model":"m","\u0070rompt":` + ids(5) + `}`, "", "prompt"},
	{"completion array in a string", EndpointCompletion, `{"model":"m","prompt":"[1,2,3,4,5]"}`, "", ""},
	{"completion messages are not bounded", EndpointCompletion, `{"model":"m","prompt":"p","messages":` + msgs(5) + `}`, "", ""},
	{"completion literals", EndpointCompletion, `{"model":"m","prompt":[-1.5e+10,true,false,null,1]}`, "prompt", "prompt"},
	{"completion prompt 10 deep", EndpointCompletion, `{"model":"m","prompt":"p",` + nest10("extra", `{"prompt":[1,2,3,4,5]}`) + `}`, "", ""},

	// Responses: input and input[i].content
	{"responses input at bound", EndpointResponses, `{"model":"m","input":` + msgs(3) + `}`, "", ""},
	{"responses input over bound", EndpointResponses, `{"model":"m","input":` + msgs(4) + `}`, "input", "input"},
	{"responses content at bound", EndpointResponses, `{"model":"m","input":[{"role":"user","content":` + iparts(2) + `}]}`, "", ""},
	{"responses content over bound", EndpointResponses, `{"model":"m","input":[{"role":"user","content":` + iparts(3) + `}]}`, "input[0].content", "input[0].content"},
	{"responses message content over bound", EndpointResponses,
		`{"model":"m","input":[{"role":"user","content":"x"},{"type":"message","role":"user","content":` + iparts(3) + `}]}`, "input[1].content", "input[1].content"},
	{"responses type after content", EndpointResponses,
		`{"model":"m","input":[{"role":"user","content":` + iparts(3) + `,"type":"message"}]}`, "input[0].content", "input[0].content"},
	{"responses reasoning item's content", EndpointResponses,
		`{"model":"m","input":[{"type":"reasoning","summary":[],"content":[{"type":"reasoning_text","text":"a"},{"type":"reasoning_text","text":"b"},{"type":"reasoning_text","text":"c"}]}]}`, "", ""},
	{"responses type after content, not a message", EndpointResponses, `{"model":"m","input":[{"content":[{},{},{}],"type":"0"}]}`, "", ""},
	{"responses item_reference with content", EndpointResponses, `{"model":"m","input":[{"type":"item_reference","id":"i","content":[1,2,3]}]}`, "", ""},
	{"responses escaped type key", EndpointResponses, `{"model":"m","input":[{"\u0074ype":"reasoning","content":[1,2,3]}]}`, "", ""},
	{"responses escaped type value", EndpointResponses,
		`{"model":"m","input":[{"type":"\u006dessage","role":"user","content":` + iparts(3) + `}]}`, "", "input[0].content"},
	{"responses escaped other key", EndpointResponses,
		`{"model":"m","input":[{"type":"message","\u0072ole":"user","content":` + iparts(3) + `}]}`, "input[0].content", "input[0].content"},
	{"responses empty type", EndpointResponses, `{"model":"m","input":[{"type":"","content":[1,2,3]}]}`, "input[0].content", "input[0].content"},
	{"responses null type", EndpointResponses, `{"model":"m","input":[{"content":[1,2,3],"type":null}]}`, "input[0].content", "input[0].content"},
	{"responses content over bound in two items", EndpointResponses,
		`{"model":"m","input":[{"type":"reasoning","content":[1,2,3]},{"role":"user","content":[1,2,3]}]}`, "input[1].content", "input[1].content"},
	{"responses escaped input key", EndpointResponses, `{"model":"m","\u0069nput":` + msgs(4) + `}`, "", "input"},
	{"responses string input", EndpointResponses, `{"model":"m","input":"[1,2,3,4,5]"}`, "", ""},
	{"responses messages are not bounded", EndpointResponses, `{"model":"m","input":"x","messages":` + msgs(5) + `}`, "", ""},
	{"responses stored prompt's variables", EndpointResponses, `{"model":"m","input":"x","prompt":{"id":"p","variables":{"input":[1,2,3,4,5]}}}`, "", ""},
	{"responses input in metadata", EndpointResponses, `{"model":"m","input":"x","metadata":{"input":[1,2,3,4,5]}}`, "", ""},
	{"responses input in a tool schema", EndpointResponses,
		`{"model":"m","input":"x","tools":[{"type":"function","name":"f","parameters":{"input":[1,2,3,4,5],"content":[[1,2,3]]}}]}`, "", ""},
	{"responses input 10 deep", EndpointResponses, `{"model":"m","input":"x",` + nest10("text", `{"input":[1,2,3,4,5]}`) + `}`, "", ""},

	// embeddings: input and input[i]
	{"embeddings token ids at bound", EndpointEmbeddings, `{"model":"m","input":` + ids(4) + `}`, "", ""},
	{"embeddings token ids over bound", EndpointEmbeddings, `{"model":"m","input":` + ids(5) + `}`, "", "input"},
	{"embeddings token arrays at bound", EndpointEmbeddings, `{"model":"m","input":[` + ids(4) + `,` + ids(1) + `]}`, "", ""},
	{"embeddings token array over bound", EndpointEmbeddings, `{"model":"m","input":[` + ids(5) + `]}`, "input[0]", "input[0]"},
	{"embeddings second token array over bound", EndpointEmbeddings, `{"model":"m","input":[[1],` + ids(5) + `]}`, "input[1]", "input[1]"},
	{"embeddings inputs at bound", EndpointEmbeddings, `{"model":"m","input":` + strs(MaxEmbeddingInputs) + `}`, "", ""},
	{"embeddings inputs over bound", EndpointEmbeddings, `{"model":"m","input":` + strs(MaxEmbeddingInputs+1) + `}`, "input", "input"},
	{"embeddings escaped input key", EndpointEmbeddings, `{"model":"m","\u0069nput":[` + ids(5) + `]}`, "", "input[0]"},
	{"embeddings arrays in strings", EndpointEmbeddings, `{"model":"m","input":["[1,2,3,4,5]","]\"[\\","\\\\"]}`, "", ""},
	{"embeddings input in metadata", EndpointEmbeddings, `{"model":"m","input":"x","metadata":{"input":[[1,2,3,4,5]]}}`, "", ""},
	{"embeddings input 10 deep", EndpointEmbeddings, `{"model":"m","input":"x",` + nest10("extra", `{"input":[[1,2,3,4,5]]}`) + `}`, "", ""},
	{"embeddings literals", EndpointEmbeddings, `{"model":"m","input":[[-1.5e+10,true,false,null,0]]}`, "input[0]", "input[0]"},
	{"embeddings prompt is not bounded", EndpointEmbeddings, `{"model":"m","input":"x","prompt":[[1,2,3,4,5]]}`, "", ""},
}

// TestScanBodyFraming is the framing suite of scanBody: for each body,
// which bound it refuses (or none), and what the full parse says.
func TestScanBodyFraming(t *testing.T) {
	for _, c := range scanCases {
		t.Run(c.name, func(t *testing.T) {
			body := []byte(c.body)
			if !jsontext.Value(body).IsValid() {
				t.Fatalf("not I-JSON: %s", body)
			}
			scanErr := checkScanAgrees(t, c.ep, body, scanLimits)
			switch {
			case c.scan == "" && scanErr != nil:
				t.Errorf("scanBody refused with %q: %s", scanErr.Param, scanErr.Message)
			case c.scan != "" && scanErr == nil:
				t.Errorf("scanBody accepted; want it refused with %q", c.scan)
			case c.scan != "" && scanErr.Param != c.scan:
				t.Errorf("scanBody refused with %q; want %q", scanErr.Param, c.scan)
			}
			parseErr := parseWith(c.ep, body, scanLimits)
			switch {
			case c.parse == "" && parseErr != nil:
				t.Errorf("parse refused with %q: %s", parseErr.Param, parseErr.Message)
			case c.parse != "" && parseErr == nil:
				t.Errorf("parse accepted; want it refused with %q", c.parse)
			case c.parse != "" && parseErr.Param != c.parse:
				t.Errorf("parse refused with %q (%s); want %q", parseErr.Param, parseErr.Message, c.parse)
			}
		})
	}
}

// FuzzScanBodyAgreesWithValidation checks scanBody, for each endpoint,
// against the validation that runs after the parse: it never panics and
// counts every value; a body it refuses, validation refuses too; and a
// body validation finds over a bound is refused by the full parse.
func FuzzScanBodyAgreesWithValidation(f *testing.F) {
	for _, c := range scanCases {
		if len(c.body) < 4096 {
			f.Add([]byte(c.body))
		}
	}
	f.Add([]byte(`[1,2,3,4,5]`))
	f.Add([]byte(`"messages"`))
	f.Add([]byte(` -1.5e+10 `))
	f.Add([]byte(`{}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		if !jsontext.Value(body).IsValid() {
			return
		}
		for _, ep := range scanEndpoints {
			checkScanAgrees(t, ep, body, scanLimits)
		}
	})
}
