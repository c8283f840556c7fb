package confyaml

import (
	"reflect"
	"slices"
	"testing"

	"frontdoor/internal/suggest"
)

type node struct {
	Name           string   `yaml:"name"`
	Models         []string `yaml:"models"`
	MaxConcurrency int      `yaml:"max_concurrency"`
}

type extra struct {
	Probes int `yaml:"probes"`
}

type index struct {
	ListSize int `yaml:"list_size"`
	extra    `yaml:",inline"`
}

type schema struct {
	Listen string  `yaml:"listen"`
	Nodes  []node  `yaml:"nodes"`
	Index  index   `yaml:"index"`
	Ratio  float64 `yaml:"ratio"`
	On     bool    `yaml:"on"`
}

var removed = map[string]string{"index.ef_search": "use probes"}

func decode(t *testing.T, doc string) ([]string, bool, schema) {
	t.Helper()
	var s schema
	problems, complete := Decode([]byte(doc), &s, removed)
	return problems, complete, s
}

func TestDecodeNamesThePathAndLine(t *testing.T) {
	problems, complete, s := decode(t, `listen: ":1"
nodes:
  - name: a
    modles: [m]
  - {name: b, max_concurency: 4}
index: {list_size: 8, prob: 2, ef_search: 3}
ratio: high
on: maybe
extra: 1
`)
	want := []string{
		"nodes[0].modles: unknown key \"modles\" (did you mean `models`?) (line 4)",
		"nodes[1].max_concurency: unknown key \"max_concurency\" (did you mean `max_concurrency`?) (line 5)",
		// An inline struct's keys are known beside the others.
		"index.prob: unknown key \"prob\" (did you mean `probes`?) (line 6)",
		`index.ef_search: removed key "ef_search": use probes (line 6)`,
		`ratio: "high" is not a number (line 7)`,
		`on: "maybe" is not true or false (line 8)`,
		// Too far from every known key for a suggestion.
		`extra: unknown key "extra" (line 9)`,
	}
	if !complete || !slices.Equal(problems, want) {
		t.Fatalf("complete %v, problems:\n%q\nwant\n%q", complete, problems, want)
	}
	// A type error leaves the rest decoded.
	if s.Listen != ":1" || len(s.Nodes) != 2 || s.Index.ListSize != 8 {
		t.Fatalf("not decoded: %+v", s)
	}
}

// A syntax error is incomplete, and named at the line of the fault (the
// item's key indented wrong), not where its list began.
func TestDecodeSyntaxErrorIsIncomplete(t *testing.T) {
	problems, complete, _ := decode(t, "nodes:\n  - name: a\n   url: x\n")
	if complete || len(problems) != 1 || problems[0] != "yaml: line 3: did not find expected '-' indicator" {
		t.Fatalf("complete %v, problems %q", complete, problems)
	}
}

func TestDecodeEmptyAndValid(t *testing.T) {
	for _, doc := range []string{"", "listen: \":1\"\nnodes: [{name: a, models: [m]}]\n"} {
		if problems, complete, _ := decode(t, doc); !complete || problems != nil {
			t.Fatalf("%q: complete %v, problems %q", doc, complete, problems)
		}
	}
}

func TestPlainTypes(t *testing.T) {
	for msg, want := range map[string]string{
		"cannot unmarshal !!str `many` into int":     `"many" is not an integer`,
		"cannot unmarshal !!seq into float64":        "a list is not a number",
		"cannot unmarshal !!map into []string":       "a mapping is not a list",
		"cannot unmarshal !!str `x` into *uint8":     `"x" is not an integer`,
		"cannot unmarshal !!int `1` into string":     `"1" is not a string`,
		"cannot unmarshal !!str `a` into main.T":     `"a" is not a mapping`,
		"cannot unmarshal !!binary into bool":        "this value is not true or false",
		"invalid duration \"x\" (use units such as)": "invalid duration \"x\" (use units such as)",
	} {
		if got := plainTypes(msg); got != want {
			t.Errorf("plainTypes(%q) = %q, want %q", msg, got, want)
		}
	}
}

func TestNearest(t *testing.T) {
	keys := []string{"models", "max_concurrency", "name", "url"}
	for word, want := range map[string]string{
		"modles":          "models", // a transposition is one edit
		"max_concurency":  "max_concurrency",
		"nmae":            "name",
		"uri":             "url",
		"temperature":     "",
		"":                "",
		"max_concurrency": "max_concurrency",
	} {
		if got := suggest.Nearest(word, keys); got != want {
			t.Errorf("Nearest(%q) = %q, want %q", word, got, want)
		}
	}
	for _, tc := range []struct {
		a, b string
		d    int
	}{{"", "abc", 3}, {"abc", "abc", 0}, {"ab", "ba", 1}, {"kitten", "sitting", 3}} {
		if d := suggest.Distance(tc.a, tc.b); d != tc.d {
			t.Errorf("suggest.Distance(%q, %q) = %d, want %d", tc.a, tc.b, d, tc.d)
		}
	}
}

func TestSchemaAndDocKeys(t *testing.T) {
	want := []string{"listen", "nodes", "nodes[].name", "nodes[].models", "nodes[].max_concurrency", "index", "index.list_size", "index.probes", "ratio", "on"}
	if got := SchemaKeys(reflect.TypeFor[schema]()); !slices.Equal(got, want) {
		t.Fatalf("SchemaKeys = %q, want %q", got, want)
	}
	got, err := DocKeys([]byte("listen: x\nnodes:\n  - {name: a}\n  - {name: b, models: [m]}\nindex: {probes: 2}\n"))
	if err != nil || !slices.Equal(got, []string{"listen", "nodes", "nodes[].name", "nodes[].models", "index", "index.probes"}) {
		t.Fatalf("DocKeys = %q, %v", got, err)
	}
}
