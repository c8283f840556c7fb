package load

import (
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// page is a /metrics page as frontdoor and gpusim write them: # HELP and
// # TYPE lines, a Prometheus histogram, a VictoriaMetrics one (untyped,
// vmrange buckets), a summary, and a label value with escapes.
const page = `# HELP frontdoor_cache_errors_total Cache errors.
# TYPE frontdoor_cache_errors_total counter
frontdoor_cache_errors_total{op="get"} 2
frontdoor_cache_errors_total{op="search"} 3
# TYPE frontdoor_cache_vector_entries gauge
frontdoor_cache_vector_entries 120
# TYPE frontdoor_cache_lookup_seconds histogram
frontdoor_cache_lookup_seconds_bucket{op="get",le="0.001"} 4
frontdoor_cache_lookup_seconds_bucket{op="get",le="0.01"} 9
frontdoor_cache_lookup_seconds_bucket{op="get",le="+Inf"} 10
frontdoor_cache_lookup_seconds_sum{op="get"} 0.05
frontdoor_cache_lookup_seconds_count{op="get"} 10
# TYPE old_lookup_seconds untyped
old_lookup_seconds_bucket{op="get",vmrange="1.000e-03...1.136e-03"} 5
old_lookup_seconds_bucket{op="get",vmrange="1.136e-03...1.292e-03"} 5
old_lookup_seconds_sum{op="get"} 0.011
old_lookup_seconds_count{op="get"} 10
# TYPE go_gc_duration_seconds summary
go_gc_duration_seconds{quantile="0.5"} 0.0002
go_gc_duration_seconds_sum 0.01
go_gc_duration_seconds_count 40
# TYPE vllm:prefix_cache_hits_total counter
vllm:prefix_cache_hits_total{model_name="qwen3-8b"} 640
frontdoor_build_info{version="v1 \"x\"\\y"} 1
`

func TestReadMetrics(t *testing.T) {
	m := Metrics{}
	for range 2 { // two replicas: every series summed
		if err := m.Read(strings.NewReader(page)); err != nil {
			t.Fatal(err)
		}
	}
	if by, ok := m.By("frontdoor_cache_errors_total", "op", nil); !ok || by["get"] != 4 || by["search"] != 6 {
		t.Errorf("errors by op = %v, %v", by, ok)
	}
	if v, ok := m.Sum("frontdoor_cache_vector_entries", nil); !ok || v != 240 {
		t.Errorf("vector entries = %v, %v", v, ok)
	}
	if _, ok := m.Sum("frontdoor_no_such_total", nil); ok {
		t.Error("a missing series was found")
	}
	if v, _ := m.Sum("frontdoor_cache_lookup_seconds_count", map[string]string{"op": "get"}); v != 20 {
		t.Errorf("histogram count = %v", v)
	}
	if v, _ := m.Sum("go_gc_duration_seconds", map[string]string{"quantile": "0.5"}); v != 0.0004 {
		t.Errorf("summary quantile = %v", v)
	}
	if v, _ := m.Sum("go_gc_duration_seconds_count", nil); v != 80 {
		t.Errorf("summary count = %v", v)
	}
	if v, _ := m.Sum("vllm:prefix_cache_hits_total", nil); v != 1280 {
		t.Errorf("vllm hits = %v", v)
	}
	if v, _ := m.Sum("frontdoor_build_info", map[string]string{"version": `v1 "x"\y`}); v != 2 {
		t.Errorf("escaped label: %v", v)
	}

	bs, ok := m.Buckets("frontdoor_cache_lookup_seconds", map[string]string{"op": "get"})
	want := []Bucket{{0, 0.001, 8}, {0.001, 0.01, 10}, {0.01, math.Inf(1), 2}}
	if !ok || len(bs) != len(want) {
		t.Fatalf("buckets = %v", bs)
	}
	for i := range want {
		if bs[i] != want[i] {
			t.Errorf("bucket %d = %v, want %v", i, bs[i], want[i])
		}
	}
	if v, over, ok := BucketQuantile(bs, 0.5); !ok || over || math.Abs(v-0.0028) > 1e-12 {
		t.Errorf("p50 = %v %v %v", v, over, ok)
	}
	if v, over, ok := BucketQuantile(bs, 0.99); !ok || !over || v != 0.01 {
		t.Errorf("p99 = %v %v %v, want the open bucket's lower bound", v, over, ok)
	}
	vm, ok := m.Buckets("old_lookup_seconds", map[string]string{"op": "get"})
	if !ok || len(vm) != 2 || vm[0].Lo != 1e-3 || vm[1].N != 10 {
		t.Errorf("vmrange buckets = %v", vm)
	}
	if _, ok := m.Buckets("frontdoor_cache_lookup_seconds", map[string]string{"op": "search"}); ok {
		t.Error("buckets of an op without any")
	}
}

func TestMetricsMinus(t *testing.T) {
	before, after := Metrics{}, Metrics{}
	if err := before.Read(strings.NewReader("a_total{x=\"1\"} 2\n")); err != nil {
		t.Fatal(err)
	}
	if err := after.Read(strings.NewReader("a_total{x=\"1\"} 5\nb_total 7\n")); err != nil {
		t.Fatal(err)
	}
	d := after.Minus(before)
	if v, _ := d.Sum("a_total", nil); v != 3 {
		t.Errorf("a = %v", v)
	}
	if v, _ := d.Sum("b_total", nil); v != 7 {
		t.Errorf("b = %v", v)
	}
	if v, _ := after.Sum("a_total", nil); v != 5 {
		t.Errorf("Minus changed its receiver: %v", v)
	}
}

func TestScrapeMetrics(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/metrics" {
			http.NotFound(w, r)
			return
		}
		_, _ = w.Write([]byte(page))
	}))
	defer srv.Close()
	m, err := ScrapeMetrics(srv.URL, srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := m.Sum("frontdoor_cache_errors_total", nil); v != 10 {
		t.Errorf("errors = %v", v)
	}
	bad := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("not a { metrics page\n"))
	}))
	defer bad.Close()
	if _, err := ScrapeMetrics(bad.URL); err == nil {
		t.Error("a page that does not parse was read")
	}
}
