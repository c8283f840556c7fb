// Package confyaml decodes a YAML config file strictly (an unknown key is
// an error) and says what is wrong in the config's own terms: each of
// yaml.v3's "line N: ..." errors becomes the YAML path of what stands on
// that line, its line number, and a plain message ("unknown key", with the
// nearest known key when it looks like a misspelling; "removed key" with
// what replaced it; `"x" is not an integer` for a wrong type) that never
// names a Go type.
package confyaml
