package telemetry

import (
	"bytes"
	"strings"
	"testing"

	"github.com/VictoriaMetrics/metrics"
)

var testFamily = NewFamily("frontdoor_test_family_total", "A family for TestFamily.")

func TestFamily(t *testing.T) {
	if got := testFamily.Series(); got != "frontdoor_test_family_total" {
		t.Errorf("Series() = %s", got)
	}
	if got, want := testFamily.Series("a", `x"y\z`, "b", "c"), `frontdoor_test_family_total{a="x\"y\\z",b="c"}`; got != want {
		t.Errorf("Series = %s, want %s", got, want)
	}
	set := metrics.NewSet()
	testFamily.NewCounter(set, "a", "1").Inc()
	testFamily.GetOrCreateCounter(set, "a", "1").Inc()
	var buf bytes.Buffer
	WriteMetrics(&buf, set)
	out := buf.String()
	for _, want := range []string{
		"# HELP frontdoor_test_family_total A family for TestFamily.\n",
		"# TYPE frontdoor_test_family_total counter\n",
		`frontdoor_test_family_total{a="1"} 2` + "\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	if !HasHelp("frontdoor_test_family_total") || HasHelp("frontdoor_test_undeclared") {
		t.Error("HasHelp does not follow the declarations")
	}
	for name, f := range map[string]func(){
		"twice":   func() { NewFamily("frontdoor_test_family_total", "Again.") },
		"no help": func() { NewFamily("frontdoor_test_nohelp", "") },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: no panic", name)
				}
			}()
			f()
		}()
	}
}
