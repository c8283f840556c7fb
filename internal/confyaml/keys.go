package confyaml

import (
	"fmt"
	"reflect"
	"strings"

	"go.yaml.in/yaml/v3"
)

// knownKeys lists the keys allowed beside the last element of path (a
// YAML path such as "nodes[0].modles"), from the yaml tags of schema.
func knownKeys(schema reflect.Type, path string) []string {
	t := schema
	segs := strings.Split(path, ".")
	for _, seg := range segs[:len(segs)-1] {
		name, _, _ := strings.Cut(seg, "[")
		st, ok := structOf(t)
		if !ok {
			return nil
		}
		f, ok := fieldByKey(st, name)
		if !ok {
			return nil
		}
		t = f.Type
	}
	st, ok := structOf(t)
	if !ok {
		return nil
	}
	var keys []string
	var collect func(st reflect.Type)
	collect = func(st reflect.Type) {
		for i := range st.NumField() {
			f := st.Field(i)
			name, opts, _ := strings.Cut(f.Tag.Get("yaml"), ",")
			switch {
			case opts == "inline":
				if ft, ok := structOf(f.Type); ok {
					collect(ft)
				}
			case name != "" && name != "-":
				keys = append(keys, name)
			}
		}
	}
	collect(st)
	return keys
}

// structOf unwraps pointers and slices down to a struct type.
func structOf(t reflect.Type) (reflect.Type, bool) {
	for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice || t.Kind() == reflect.Array {
		t = t.Elem()
	}
	return t, t.Kind() == reflect.Struct
}

func fieldByKey(st reflect.Type, key string) (reflect.StructField, bool) {
	for i := range st.NumField() {
		f := st.Field(i)
		name, opts, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if name == key {
			return f, true
		}
		if opts == "inline" {
			if ft, ok := structOf(f.Type); ok {
				if g, ok := fieldByKey(ft, key); ok {
					return g, true
				}
			}
		}
	}
	return reflect.StructField{}, false
}

// SchemaKeys lists the YAML path of every key the yaml tags of schema (a
// struct type) allow, a list's items as "[]" ("nodes[].url"). A map, or a
// type that decodes itself (yaml.Unmarshaler), is one key: its contents
// are not walked.
func SchemaKeys(schema reflect.Type) []string {
	var out []string
	var walk func(t reflect.Type, prefix string)
	walk = func(t reflect.Type, prefix string) {
		for i := range t.NumField() {
			f := t.Field(i)
			name, opts, _ := strings.Cut(f.Tag.Get("yaml"), ",")
			if opts == "inline" {
				if ft, ok := structOf(f.Type); ok {
					walk(ft, prefix)
				}
				continue
			}
			if name == "" || name == "-" {
				continue
			}
			p := prefix + name
			out = append(out, p)
			ft := f.Type
			for ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if decodesItself(ft) {
				continue
			}
			if ft.Kind() == reflect.Slice || ft.Kind() == reflect.Array {
				p += "[]"
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct && !decodesItself(ft) {
				walk(ft, p+".")
			}
		}
	}
	if st, ok := structOf(schema); ok {
		walk(st, "")
	}
	return out
}

var unmarshalerType = reflect.TypeFor[yaml.Unmarshaler]()

func decodesItself(t reflect.Type) bool {
	return t.Implements(unmarshalerType) || reflect.PointerTo(t).Implements(unmarshalerType)
}

// DocKeys lists the YAML path of every key data holds, list items as "[]"
// (as SchemaKeys writes them), each once.
func DocKeys(data []byte) ([]string, error) {
	var root yaml.Node
	if err := yaml.Unmarshal(data, &root); err != nil {
		return nil, fmt.Errorf("doc keys: %w", err)
	}
	seen := map[string]bool{}
	var out []string
	var walk func(n *yaml.Node, path string)
	walk = func(n *yaml.Node, path string) {
		switch n.Kind {
		case yaml.DocumentNode:
			for _, c := range n.Content {
				walk(c, path)
			}
		case yaml.MappingNode:
			for i := 0; i+1 < len(n.Content); i += 2 {
				p := n.Content[i].Value
				if path != "" {
					p = path + "." + p
				}
				if !seen[p] {
					seen[p] = true
					out = append(out, p)
				}
				walk(n.Content[i+1], p)
			}
		case yaml.SequenceNode:
			for _, c := range n.Content {
				walk(c, path+"[]")
			}
		}
	}
	walk(&root, "")
	return out, nil
}
