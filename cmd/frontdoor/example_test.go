package main

import (
	"os"
	"reflect"
	"slices"
	"testing"

	"frontdoor/internal/confyaml"
	"frontdoor/router"
)

// removedKeys are read only to refuse them (check-config says what
// replaced them): the example cannot hold them.
var removedKeys = []string{"server", "timeouts.shutdown"}

// deploy/examples/frontdoor.yaml says it holds every key of the schema:
// every yaml key of router.Config is in it (list items' keys in some item).
func TestExampleHoldsEveryKey(t *testing.T) {
	data, err := os.ReadFile("../../deploy/examples/frontdoor.yaml")
	if err != nil {
		t.Fatal(err)
	}
	doc, err := confyaml.DocKeys(data)
	if err != nil {
		t.Fatal(err)
	}
	schema := confyaml.SchemaKeys(reflect.TypeFor[router.Config]())
	if len(schema) < 100 || !slices.Contains(schema, "nodes[].url") || !slices.Contains(schema, "cache.semantic.verify.grey_zone") {
		t.Fatalf("the schema's keys were not walked: %q", schema)
	}
	for _, k := range schema {
		if !slices.Contains(doc, k) && !slices.Contains(removedKeys, k) {
			t.Errorf("deploy/examples/frontdoor.yaml lacks %s", k)
		}
	}
	for _, k := range removedKeys {
		if !slices.Contains(schema, k) {
			t.Errorf("%s is no longer read: drop it from removedKeys", k)
		}
	}
}
