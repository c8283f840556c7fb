package confyaml

import (
	"bytes"
	"errors"
	"io"
	"reflect"
	"regexp"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"frontdoor/internal/suggest"
)

// Decode decodes data over v, a pointer to a struct whose yaml tags name
// the known keys, refusing unknown keys. removed maps the YAML path of a
// key earlier versions accepted (e.g. "cache.local_index.m") to what
// replaced it.
//
// problems lists what is wrong, one message each. complete is false when
// yaml.v3 stopped early (a syntax error, or anything but a type error):
// then v holds less than data says and is not worth checking further.
// On a type error yaml.v3 decodes the rest, so complete is true and the
// problems are all of them.
func Decode(data []byte, v any, removed map[string]string) (problems []string, complete bool) {
	var root yaml.Node
	if err := yaml.Unmarshal(data, &root); err != nil {
		return []string{syntaxError(data, err)}, false
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	err := dec.Decode(v)
	if err == nil || errors.Is(err, io.EOF) {
		return nil, true
	}
	problems = rewrite(err, &root, reflect.TypeOf(v), removed)
	var te *yaml.TypeError
	return problems, errors.As(err, &te)
}

// syntaxError restates yaml.v3's syntax error err at the line of the
// fault. yaml.v3 names the line where the enclosing block began (a list's
// key for an item indented wrong three lines below it); the fault is on
// the first line at which the document, cut there, fails the same way.
func syntaxError(data []byte, err error) string {
	msg := err.Error()
	g := yamlLine.FindStringSubmatch(msg)
	lines := bytes.SplitAfter(data, []byte("\n"))
	if g == nil || len(lines) > maxProbeLines {
		return msg
	}
	var prefix []byte
	var probe yaml.Node
	for i, l := range lines {
		prefix = append(prefix, l...)
		perr := yaml.Unmarshal(prefix, &probe)
		if perr == nil {
			continue
		}
		if p := yamlLine.FindStringSubmatch(perr.Error()); p != nil && p[2] == g[2] {
			return "yaml: line " + strconv.Itoa(i+1) + ": " + g[2]
		}
	}
	return msg
}

// maxProbeLines bounds syntaxError's work (a parse per line): past it the
// line yaml.v3 names is reported.
const maxProbeLines = 5000

var (
	yamlLine   = regexp.MustCompile(`line (\d+): (.*)`)
	yamlField  = regexp.MustCompile(`field (\S+) not found in type \S+`)
	yamlValue  = regexp.MustCompile("unmarshal !!\\w+ `([^`]*)`") // backquotes inside: no raw string
	yamlQuoted = regexp.MustCompile(`"((?:[^"\\]|\\.)*)"`)
)

// rewrite rewrites yaml.v3's "line N: ..." errors to name the YAML path;
// schema is the type decoded into.
func rewrite(err error, root *yaml.Node, schema reflect.Type, removed map[string]string) []string {
	var msgs []string
	var te *yaml.TypeError
	if errors.As(err, &te) {
		msgs = te.Errors
	} else {
		msgs = []string{err.Error()}
	}
	out := make([]string, 0, len(msgs))
	for _, m := range msgs {
		if g := yamlLine.FindStringSubmatch(m); g != nil {
			line, _ := strconv.Atoi(g[1])
			hint, msg := "", strings.TrimSpace(g[2])
			f := yamlField.FindStringSubmatch(msg)
			if f != nil {
				hint = f[1]
			} else if v := yamlValue.FindStringSubmatch(msg); v != nil {
				hint = v[1]
			} else if q := yamlQuoted.FindStringSubmatch(msg); q != nil {
				hint, _ = strconv.Unquote(`"` + q[1] + `"`)
			}
			if p := pathAtLine(root, line, hint); p != "" {
				if why, ok := removed[p]; ok && f != nil {
					msg = "removed key " + strconv.Quote(f[1]) + ": " + why
				} else if f != nil {
					// Name the YAML key, never the Go type.
					msg = "unknown key " + strconv.Quote(f[1])
					if near := suggest.Nearest(f[1], knownKeys(schema, p)); near != "" {
						msg += " (did you mean `" + near + "`?)"
					}
				}
				m = p + ": " + plainTypes(msg) + " (line " + g[1] + ")"
			} else if f != nil {
				m = "line " + g[1] + ": unknown key " + strconv.Quote(f[1])
			}
		}
		out = append(out, m)
	}
	return out
}

var yamlCannot = regexp.MustCompile("cannot unmarshal !!(\\w+) (`[^`]*` )?into (\\S+)")

// plainTypes says what yaml.v3's "cannot unmarshal !!str `x` into int"
// means in the config's terms: "x" is not an integer.
func plainTypes(msg string) string {
	g := yamlCannot.FindStringSubmatch(msg)
	if g == nil {
		return msg
	}
	var want string
	switch t := strings.TrimPrefix(g[3], "*"); {
	case strings.HasPrefix(t, "int"), strings.HasPrefix(t, "uint"):
		want = "an integer"
	case strings.HasPrefix(t, "float"):
		want = "a number"
	case t == "bool":
		want = "true or false"
	case t == "string":
		want = "a string"
	case strings.HasPrefix(t, "[]"):
		want = "a list"
	default:
		want = "a mapping"
	}
	got := "a " + map[string]string{"map": "mapping", "seq": "list"}[g[1]]
	if g[2] != "" {
		got = strconv.Quote(strings.Trim(g[2], "` "))
	} else if got == "a " {
		got = "this value"
	}
	return got + " is not " + want
}

// pathAtLine finds the YAML path of what stands on line: the deepest key or
// item there, preferring one whose key or value equals hint (flow style puts
// several on one line).
func pathAtLine(root *yaml.Node, line int, hint string) string {
	best, bestDepth, bestHint := "", -1, false
	consider := func(path string, depth int, matches bool) {
		if (matches && !bestHint) || (matches == bestHint && depth > bestDepth) {
			best, bestDepth, bestHint = path, depth, matches
		}
	}
	var walk func(n *yaml.Node, path string, depth int)
	walk = func(n *yaml.Node, path string, depth int) {
		switch n.Kind {
		case yaml.DocumentNode:
			for _, c := range n.Content {
				walk(c, path, depth)
			}
		case yaml.MappingNode:
			for i := 0; i+1 < len(n.Content); i += 2 {
				k, v := n.Content[i], n.Content[i+1]
				p := k.Value
				if path != "" {
					p = path + "." + k.Value
				}
				if k.Line == line || (v.Kind == yaml.ScalarNode && v.Line == line) {
					consider(p, depth, hint != "" && (k.Value == hint || (v.Kind == yaml.ScalarNode && v.Value == hint)))
				}
				walk(v, p, depth+1)
			}
		case yaml.SequenceNode:
			for i, c := range n.Content {
				p := path + "[" + strconv.Itoa(i) + "]"
				if c.Kind == yaml.ScalarNode && c.Line == line {
					consider(p, depth, hint != "" && c.Value == hint)
				}
				walk(c, p, depth+1)
			}
		}
	}
	walk(root, "", 0)
	return best
}
