package gpusim

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/valyala/fastjson"
)

// The judge's answers.
const (
	JudgeYes    = "yes"
	JudgeNo     = "no"
	JudgeUnsure = "unsure"
)

// verdict is a judge answer inside the server; verdictNone marks a request
// that is not a judge request.
type verdict uint8

const (
	verdictNone verdict = iota
	verdictYes
	verdictNo
	verdictUnsure
	numVerdicts
)

var verdictWords = [numVerdicts]string{"", JudgeYes, JudgeNo, JudgeUnsure}

func (v verdict) String() string { return verdictWords[v] }

// Label bits of a pair: a pair seen with both labels is in conflict.
const (
	labelled0 uint8 = 1 << iota
	labelled1
)

// pairKey is an unordered pair of trimmed texts (a <= b).
type pairKey struct{ a, b string }

func keyOf(s1, s2 string) pairKey {
	if s2 < s1 {
		s1, s2 = s2, s1
	}
	return pairKey{s1, s2}
}

// JudgeLabels is a read-only table of labelled sentence pairs that lets
// gpusim answer judge requests (see Config.JudgeLabels). Build it with
// LoadJudgeLabels or ReadJudgeLabels; it is safe for concurrent use and may
// be shared by several servers.
type JudgeLabels struct {
	pairs map[pairKey]uint8 // label bits
	stats JudgeLabelsStats
}

// JudgeLabelsStats describes what a label file held.
type JudgeLabelsStats struct {
	Lines          int  // lines read, blank ones included
	Header         bool // the first line was a header and was skipped
	Malformed      int  // lines skipped: not three tab-separated fields, an empty text, or a label other than 0 or 1
	FirstMalformed int  // line number (1-based) of the first malformed line; 0 if none
	Pairs          int  // distinct unordered pairs of texts, the four kinds below
	Same           int  // pairs labelled 1 only: answered yes
	Different      int  // pairs labelled 0 only: answered no
	Conflicting    int  // pairs labelled 0 on one line and 1 on another: answered unsure
	Identical      int  // the same text twice: answered yes whatever the label
}

// Stats reports what the label file held.
func (l *JudgeLabels) Stats() JudgeLabelsStats { return l.stats }

// Verdict is the judge's answer for a cached and a new question: JudgeYes
// when the two texts are the same or the pair is labelled 1 (in either
// order), JudgeNo when it is labelled 0, JudgeUnsure when it is not in the
// table or is labelled both ways. Texts are compared after trimming
// surrounding white space; nothing else is normalised.
func (l *JudgeLabels) Verdict(cached, asked string) string {
	return l.verdict(cached, asked).String()
}

func (l *JudgeLabels) verdict(cached, asked string) verdict {
	cached, asked = strings.TrimSpace(cached), strings.TrimSpace(asked)
	if cached == asked {
		return verdictYes
	}
	switch l.pairs[keyOf(cached, asked)] {
	case labelled1:
		return verdictYes
	case labelled0:
		return verdictNo
	}
	return verdictUnsure
}

// maxLabelLine bounds one line of a label file.
const maxLabelLine = 1 << 20

// LoadJudgeLabels reads a label file (see ReadJudgeLabels).
func LoadJudgeLabels(path string) (*JudgeLabels, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("judge labels: %w", err)
	}
	defer f.Close()
	l, err := ReadJudgeLabels(f)
	if err != nil {
		return nil, fmt.Errorf("judge labels %s: %w", path, err)
	}
	return l, nil
}

// ReadJudgeLabels reads labelled pairs, one a line:
// sentence1<TAB>sentence2<TAB>label, label 1 for the same meaning and 0 for
// a different one (the format of the LCQMC, PAWS-X and MRPC evaluation
// files). Texts and label are trimmed of surrounding white space (so CRLF
// line ends are fine); a UTF-8 byte-order mark is ignored; blank lines are
// ignored. A first line whose label field is not 0 or 1 (such as
// "sentence1<TAB>sentence2<TAB>label") is a header and is skipped. Any other
// line that is not three fields with two non-empty texts and a label of 0
// or 1 is skipped and counted in Stats().Malformed. A pair labelled both 0
// and 1 on different lines is answered unsure. It is an error when no line
// holds a pair.
func ReadJudgeLabels(r io.Reader) (*JudgeLabels, error) {
	l := &JudgeLabels{pairs: make(map[pairKey]uint8)}
	st := &l.stats
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), maxLabelLine)
	for sc.Scan() {
		st.Lines++
		line := sc.Text()
		if st.Lines == 1 {
			line = strings.TrimPrefix(line, "\ufeff")
		}
		if strings.TrimSpace(line) == "" {
			continue
		}
		fields := strings.Split(line, "\t")
		var s1, s2, label string
		if len(fields) == 3 {
			s1, s2, label = strings.TrimSpace(fields[0]), strings.TrimSpace(fields[1]), strings.TrimSpace(fields[2])
		}
		var bit uint8
		switch label {
		case "0":
			bit = labelled0
		case "1":
			bit = labelled1
		}
		if len(fields) == 3 && bit == 0 && st.Lines == 1 {
			st.Header = true
			continue
		}
		if bit == 0 || s1 == "" || s2 == "" {
			st.Malformed++
			if st.FirstMalformed == 0 {
				st.FirstMalformed = st.Lines
			}
			continue
		}
		l.pairs[keyOf(s1, s2)] |= bit
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return nil, fmt.Errorf("line %d: longer than %d bytes", st.Lines+1, maxLabelLine)
		}
		return nil, err
	}
	if len(l.pairs) == 0 {
		return nil, fmt.Errorf("no labelled pairs in %d lines (%d malformed): want sentence1<TAB>sentence2<TAB>label (0 or 1)",
			st.Lines, st.Malformed)
	}
	st.Pairs = len(l.pairs)
	for k, bits := range l.pairs {
		switch {
		case k.a == k.b:
			st.Identical++
		case bits == labelled1:
			st.Same++
		case bits == labelled0:
			st.Different++
		default:
			st.Conflicting++
		}
	}
	return l, nil
}

// judgeRequest recognises a judge request (cache.JudgeRequest): a chat
// whose last message is a user message whose content is a string holding
// exactly the JSON object {"cached_question": "...", "new_question": "..."}
// (both strings, no other field, each once). The two questions are the
// decoded JSON strings, whatever they say: a question that carries an
// instruction or quotes is a text like any other, looked up as it is. It
// returns the verdict, or verdictNone for any other request.
func (s *Server) judgeRequest(v *fastjson.Value) verdict {
	msgs := v.GetArray("messages")
	if len(msgs) == 0 {
		return verdictNone
	}
	last := msgs[len(msgs)-1]
	if string(last.GetStringBytes("role")) != "user" {
		return verdictNone
	}
	c := last.Get("content")
	if c == nil || c.Type() != fastjson.TypeString {
		return verdictNone
	}
	content := c.GetStringBytes()
	if i := firstNonSpace(content); i == len(content) || content[i] != '{' {
		return verdictNone // cheap exit for ordinary chats
	}
	p := parserPool.Get()
	defer parserPool.Put(p)
	obj, err := p.ParseBytes(content)
	if err != nil || obj.Type() != fastjson.TypeObject {
		return verdictNone
	}
	o, _ := obj.Object()
	if o.Len() != 2 {
		return verdictNone
	}
	var cached, asked []byte
	var seenCached, seenNew, bad bool
	o.Visit(func(k []byte, fv *fastjson.Value) {
		if fv.Type() != fastjson.TypeString {
			bad = true
			return
		}
		switch string(k) {
		case "cached_question":
			cached, seenCached = fv.GetStringBytes(), true
		case "new_question":
			asked, seenNew = fv.GetStringBytes(), true
		default:
			bad = true
		}
	})
	if bad || !seenCached || !seenNew {
		return verdictNone
	}
	return s.cfg.JudgeLabels.verdict(string(cached), string(asked))
}

func firstNonSpace(b []byte) int {
	i := 0
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}
