package load

import (
	"fmt"
	"io"
	"math"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Sample is one series of a /metrics page. A histogram is read as its
// series name_bucket (with le), name_sum and name_count, a summary as name
// (with quantile), name_sum and name_count, as the text format shows them.
type Sample struct {
	Name   string
	Labels map[string]string
	Value  float64
}

// Metrics holds the series of one or more /metrics pages, keyed by name
// and sorted labels; a series on several pages holds the sum of its values.
type Metrics map[string]*Sample

var metricsClient = &http.Client{Timeout: 10 * time.Second}

// ScrapeMetrics reads GET base/metrics of each base URL (http://host:port)
// and sums them series by series.
func ScrapeMetrics(bases ...string) (Metrics, error) {
	m := Metrics{}
	for _, u := range bases {
		resp, err := metricsClient.Get(u + "/metrics")
		if err != nil {
			return nil, fmt.Errorf("metrics: %w", err)
		}
		err = m.Read(resp.Body)
		resp.Body.Close()
		if err != nil {
			return nil, fmt.Errorf("metrics of %s: %w", u, err)
		}
	}
	return m, nil
}

// Read adds the series of a page in the Prometheus text format, parsed by
// prometheus/common/expfmt, to m.
func (m Metrics) Read(r io.Reader) error {
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(r)
	if err != nil {
		return err
	}
	for name, f := range fams {
		for _, s := range f.GetMetric() {
			labels := make(map[string]string, len(s.GetLabel()))
			for _, l := range s.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			switch {
			case s.Counter != nil:
				m.add(name, labels, s.GetCounter().GetValue())
			case s.Gauge != nil:
				m.add(name, labels, s.GetGauge().GetValue())
			case s.Untyped != nil:
				m.add(name, labels, s.GetUntyped().GetValue())
			case s.Summary != nil:
				sm := s.GetSummary()
				for _, q := range sm.GetQuantile() {
					m.add(name, with(labels, model.QuantileLabel, q.GetQuantile()), q.GetValue())
				}
				if sm.SampleSum != nil {
					m.add(name+"_sum", labels, sm.GetSampleSum())
				}
				if sm.SampleCount != nil {
					m.add(name+"_count", labels, float64(sm.GetSampleCount()))
				}
			case s.Histogram != nil:
				h := s.GetHistogram()
				for _, b := range h.GetBucket() {
					n := float64(b.GetCumulativeCount())
					if b.CumulativeCountFloat != nil {
						n = b.GetCumulativeCountFloat()
					}
					m.add(name+"_bucket", with(labels, model.BucketLabel, b.GetUpperBound()), n)
				}
				if h.SampleSum != nil {
					m.add(name+"_sum", labels, h.GetSampleSum())
				}
				switch {
				case h.SampleCountFloat != nil:
					m.add(name+"_count", labels, h.GetSampleCountFloat())
				case h.SampleCount != nil:
					m.add(name+"_count", labels, float64(h.GetSampleCount()))
				}
			}
		}
	}
	return nil
}

// with is labels and one more, whose value is v.
func with(labels map[string]string, k string, v float64) map[string]string {
	out := make(map[string]string, len(labels)+1)
	for lk, lv := range labels {
		out[lk] = lv
	}
	out[k] = strconv.FormatFloat(v, 'g', -1, 64)
	return out
}

func (m Metrics) add(name string, labels map[string]string, v float64) {
	k := seriesKey(name, labels)
	if s := m[k]; s != nil {
		s.Value += v
	} else {
		m[k] = &Sample{Name: name, Labels: labels, Value: v}
	}
}

func seriesKey(name string, labels map[string]string) string {
	ks := make([]string, 0, len(labels))
	for k, v := range labels {
		ks = append(ks, k+"="+strconv.Quote(v))
	}
	sort.Strings(ks)
	return name + "{" + strings.Join(ks, ",") + "}"
}

// Minus is m - before, series by series.
func (m Metrics) Minus(before Metrics) Metrics {
	out := Metrics{}
	for k, s := range m {
		d := *s
		if b := before[k]; b != nil {
			d.Value -= b.Value
		}
		out[k] = &d
	}
	return out
}

// By sums the series called name that carry every label of match, grouped
// by the value of label; ok is false when no such series exists.
func (m Metrics) By(name, label string, match map[string]string) (sums map[string]float64, ok bool) {
	sums = map[string]float64{}
outer:
	for _, s := range m {
		if s.Name != name {
			continue
		}
		for k, v := range match {
			if s.Labels[k] != v {
				continue outer
			}
		}
		ok = true
		sums[s.Labels[label]] += s.Value
	}
	return sums, ok
}

// Sum sums the series called name that carry every label of match; ok is
// false when no such series exists.
func (m Metrics) Sum(name string, match map[string]string) (sum float64, ok bool) {
	sums, ok := m.By(name, "", match)
	return sums[""], ok
}

// Bucket is one histogram bucket: N observations in (Lo, Hi].
type Bucket struct{ Lo, Hi, N float64 }

// Buckets reads the histogram name, the series that carry every label of
// match, with Prometheus (le, cumulative) or VictoriaMetrics (vmrange)
// buckets, merged over the pages; ok is false when it has none.
func (m Metrics) Buckets(name string, match map[string]string) (bs []Bucket, ok bool) {
	les := map[float64]float64{}
outer:
	for _, s := range m {
		if s.Name != name+"_bucket" {
			continue
		}
		for k, v := range match {
			if s.Labels[k] != v {
				continue outer
			}
		}
		if le, ok := s.Labels["le"]; ok {
			v, err := strconv.ParseFloat(le, 64)
			if err == nil {
				les[v] += s.Value
			}
		} else if r, ok := s.Labels["vmrange"]; ok {
			lo, hi, _ := strings.Cut(r, "...")
			l, err1 := strconv.ParseFloat(lo, 64)
			h, err2 := strconv.ParseFloat(hi, 64)
			if err1 == nil && err2 == nil {
				bs = append(bs, Bucket{l, h, s.Value})
			}
		}
	}
	if len(les) > 0 {
		bounds := make([]float64, 0, len(les))
		for le := range les {
			bounds = append(bounds, le)
		}
		sort.Float64s(bounds)
		prev, cum := 0.0, 0.0
		for _, le := range bounds {
			bs = append(bs, Bucket{prev, le, les[le] - cum})
			prev, cum = le, les[le]
		}
	}
	sort.Slice(bs, func(i, j int) bool { return bs[i].Lo < bs[j].Lo })
	return bs, len(bs) > 0
}

// BucketQuantile interpolates linearly inside the bucket holding the
// q-quantile; in an open last bucket it returns that bucket's lower bound,
// with over set.
func BucketQuantile(bs []Bucket, q float64) (v float64, over, ok bool) {
	total := 0.0
	for _, b := range bs {
		total += b.N
	}
	if total <= 0 {
		return 0, false, false
	}
	target, cum := q*total, 0.0
	for _, b := range bs {
		if b.N > 0 && cum+b.N >= target {
			if math.IsInf(b.Hi, 1) {
				return b.Lo, true, true
			}
			return b.Lo + (target-cum)/b.N*(b.Hi-b.Lo), false, true
		}
		cum += b.N
	}
	return bs[len(bs)-1].Hi, false, true
}
