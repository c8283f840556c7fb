package telemetry

import (
	"bytes"
	"io"
	"strings"
	"sync"

	"github.com/VictoriaMetrics/metrics"

	"frontdoor/internal/buildinfo"
)

// Family is a metric family: its name and the text of its # HELP line.
// Each family is declared once, as a package-level variable made by
// NewFamily, beside its help text; its series are made through it, so a
// family cannot be exposed without its help. WriteMetrics writes the help
// of every declared family.
type Family struct {
	name, help string
}

// families is the help text of every declared family, by name.
var families sync.Map // string -> string

// NewFamily declares a family. It panics on an empty help text or a name
// declared twice (both are programming errors found at start).
func NewFamily(name, help string) Family {
	if name == "" || help == "" {
		panic("telemetry: metric family " + name + " declared without a name or help text")
	}
	if _, dup := families.LoadOrStore(name, help); dup {
		panic("telemetry: metric family " + name + " declared twice")
	}
	return Family{name: name, help: help}
}

// Name is the family's name.
func (f Family) Name() string { return f.name }

// Help is the family's # HELP text.
func (f Family) Help() string { return f.help }

// Series is the name of the family's series with the given labels, as
// name and value pairs: Series("op", "get") is name{op="get"}. Values are
// escaped; names are written as they are.
func (f Family) Series(labels ...string) string {
	if len(labels) == 0 {
		return f.name
	}
	if len(labels)%2 != 0 {
		panic("telemetry: " + f.name + ": labels must be name and value pairs")
	}
	var b strings.Builder
	b.WriteString(f.name)
	for i := 0; i < len(labels); i += 2 {
		if i == 0 {
			b.WriteByte('{')
		} else {
			b.WriteByte(',')
		}
		b.WriteString(labels[i])
		b.WriteString(`="`)
		b.WriteString(promLabel(labels[i+1]))
		b.WriteByte('"')
	}
	b.WriteByte('}')
	return b.String()
}

// NewCounter registers a counter series of the family in set; it panics
// if the series exists (metrics.Set.NewCounter).
func (f Family) NewCounter(set *metrics.Set, labels ...string) *metrics.Counter {
	return set.NewCounter(f.Series(labels...))
}

// GetOrCreateCounter returns the counter series of the family in set,
// made on first use.
func (f Family) GetOrCreateCounter(set *metrics.Set, labels ...string) *metrics.Counter {
	return set.GetOrCreateCounter(f.Series(labels...))
}

// NewGauge registers a gauge series of the family in set that reads
// value at every scrape; it panics if the series exists.
func (f Family) NewGauge(set *metrics.Set, value func() float64, labels ...string) *metrics.Gauge {
	return set.NewGauge(f.Series(labels...), value)
}

// GetOrCreateGauge returns the gauge series of the family in set; value
// is used only when the series is made here.
func (f Family) GetOrCreateGauge(set *metrics.Set, value func() float64, labels ...string) *metrics.Gauge {
	return set.GetOrCreateGauge(f.Series(labels...), value)
}

// NewHistogram registers a Prometheus histogram series of the family in
// set, with the given bucket upper bounds (nil: the library's default);
// it panics if the series exists.
func (f Family) NewHistogram(set *metrics.Set, buckets []float64, labels ...string) *metrics.PrometheusHistogram {
	if buckets == nil {
		return set.NewPrometheusHistogram(f.Series(labels...))
	}
	return set.NewPrometheusHistogramExt(f.Series(labels...), buckets)
}

// GetOrCreateHistogram returns the Prometheus histogram series of the
// family in set, made on first use with the given bucket upper bounds
// (nil: the library's default).
func (f Family) GetOrCreateHistogram(set *metrics.Set, buckets []float64, labels ...string) *metrics.PrometheusHistogram {
	if buckets == nil {
		return set.GetOrCreatePrometheusHistogram(f.Series(labels...))
	}
	return set.GetOrCreatePrometheusHistogramExt(f.Series(labels...), buckets)
}

func init() {
	// # HELP and # TYPE lines for every family, process-wide.
	metrics.ExposeMetadata(true)
}

var buildInfo = NewFamily("frontdoor_build_info", "Version, VCS revision and Go version of the running binary; always 1.")

// RegisterBuildInfo exposes frontdoor_build_info.
func RegisterBuildInfo(set *metrics.Set) {
	bi := buildinfo.Get()
	buildInfo.NewGauge(set, func() float64 { return 1 }, "version", bi.Version, "revision", bi.Revision, "goversion", bi.GoVersion)
}

var promLabelEscaper = strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`)

func promLabel(s string) string { return promLabelEscaper.Replace(s) }

// WriteMetrics writes set and the process metrics to w, each family with
// its # HELP text.
func WriteMetrics(w io.Writer, set *metrics.Set) {
	var buf bytes.Buffer
	set.WritePrometheus(&buf)
	metrics.WriteProcessMetrics(&buf)
	out := make([]byte, 0, buf.Len()+4096)
	for b := buf.Bytes(); len(b) > 0; {
		line := b
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			line, b = b[:i+1], b[i+1:]
		} else {
			b = nil
		}
		if t, ok := bytes.CutPrefix(line, []byte("# TYPE ")); ok && bytes.HasSuffix(t, []byte("_total gauge\n")) {
			// The library types its process_io_*_total counters as gauges.
			out = append(out, line[:len(line)-len("gauge\n")]...)
			out = append(out, "counter\n"...)
			continue
		}
		name, ok := bytes.CutPrefix(bytes.TrimRight(line, "\n"), []byte("# HELP "))
		if !ok || bytes.IndexByte(name, ' ') >= 0 {
			out = append(out, line...)
			continue
		}
		out = append(out, "# HELP "...)
		out = append(out, name...)
		out = append(out, ' ')
		out = append(out, helpFor(string(name))...)
		out = append(out, '\n')
	}
	_, _ = w.Write(out)
}

// HasHelp reports whether family was declared with NewFamily.
func HasHelp(family string) bool {
	_, ok := families.Load(family)
	return ok
}

func helpFor(family string) string {
	if h, ok := families.Load(family); ok {
		return h.(string)
	}
	switch {
	case strings.HasPrefix(family, "go_"):
		return "Go runtime metric (github.com/VictoriaMetrics/metrics)."
	case strings.HasPrefix(family, "process_"):
		return "Process metric (github.com/VictoriaMetrics/metrics)."
	}
	return "Undocumented."
}
