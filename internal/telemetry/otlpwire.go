package telemetry

import (
	"encoding/binary"
	"math"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/sdk/instrumentation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// The OTLP trace export request (opentelemetry-proto, trace/v1 and
// collector/trace/v1, stable since 1.0), encoded directly: the field
// numbers below are the .proto files'. A generated encoder would link
// protobuf's runtime and, through the upstream exporter's options, gRPC:
// about 140 packages and 20 MB of binary for one message type that
// frontdoor only writes. Zero values are left out, as proto3 does.
// TestOTLPEncodingRoundTrips decodes the output with the generated types.

const (
	wireVarint  = 0
	wireFixed64 = 1
	wireBytes   = 2
	wireFixed32 = 5
)

func appendTag(b []byte, field int, wire int) []byte {
	return binary.AppendUvarint(b, uint64(field)<<3|uint64(wire))
}

func appendVarintField(b []byte, field int, v uint64) []byte {
	if v == 0 {
		return b
	}
	return binary.AppendUvarint(appendTag(b, field, wireVarint), v)
}

func appendFixed64Field(b []byte, field int, v uint64) []byte {
	if v == 0 {
		return b
	}
	return binary.LittleEndian.AppendUint64(appendTag(b, field, wireFixed64), v)
}

func appendFixed32Field(b []byte, field int, v uint32) []byte {
	if v == 0 {
		return b
	}
	return binary.LittleEndian.AppendUint32(appendTag(b, field, wireFixed32), v)
}

func appendBytesField(b []byte, field int, v []byte) []byte {
	if len(v) == 0 {
		return b
	}
	b = binary.AppendUvarint(appendTag(b, field, wireBytes), uint64(len(v)))
	return append(b, v...)
}

func appendStringField(b []byte, field int, v string) []byte {
	if v == "" {
		return b
	}
	b = binary.AppendUvarint(appendTag(b, field, wireBytes), uint64(len(v)))
	return append(b, v...)
}

// appendMessage appends field as an embedded message written by fill, even
// when it is empty (an empty AnyValue still says "a value").
func appendMessage(b []byte, field int, fill func([]byte) []byte) []byte {
	b = appendTag(b, field, wireBytes)
	// Reserve the length as one byte, the common case, and move the body if
	// it is longer than 127 bytes.
	at := len(b)
	b = append(b, 0)
	b = fill(b)
	n := len(b) - at - 1
	if n < 0x80 {
		b[at] = byte(n)
		return b
	}
	var lenBuf [binary.MaxVarintLen64]byte
	l := binary.PutUvarint(lenBuf[:], uint64(n))
	b = append(b, lenBuf[:l-1]...) // room for the longer length
	copy(b[at+l:], b[at+1:at+1+n])
	copy(b[at:], lenBuf[:l])
	return b
}

// encodeTraces is an ExportTraceServiceRequest of spans, grouped by
// resource and then by instrumentation scope, in the spans' order.
func encodeTraces(b []byte, spans []sdktrace.ReadOnlySpan) []byte {
	type group struct {
		res    *resource.Resource
		scopes []instrumentation.Scope
		spans  [][]sdktrace.ReadOnlySpan // by scope
	}
	var groups []*group
	byRes := map[attribute.Distinct]*group{}
	for _, s := range spans {
		if s == nil {
			continue
		}
		res := s.Resource()
		g := byRes[res.Equivalent()]
		if g == nil {
			g = &group{res: res}
			byRes[res.Equivalent()] = g
			groups = append(groups, g)
		}
		sc := s.InstrumentationScope()
		i := 0
		for i < len(g.scopes) && !sameScope(g.scopes[i], sc) {
			i++
		}
		if i == len(g.scopes) {
			g.scopes = append(g.scopes, sc)
			g.spans = append(g.spans, nil)
		}
		g.spans[i] = append(g.spans[i], s)
	}
	for _, g := range groups {
		b = appendMessage(b, 1, func(b []byte) []byte { // ResourceSpans
			b = appendMessage(b, 1, func(b []byte) []byte { // Resource
				for it := g.res.Iter(); it.Next(); {
					b = appendKeyValue(b, 1, it.Attribute())
				}
				return b
			})
			for i, sc := range g.scopes {
				b = appendMessage(b, 2, func(b []byte) []byte { // ScopeSpans
					b = appendMessage(b, 1, func(b []byte) []byte { // InstrumentationScope
						b = appendStringField(b, 1, sc.Name)
						b = appendStringField(b, 2, sc.Version)
						for it := sc.Attributes.Iter(); it.Next(); {
							b = appendKeyValue(b, 3, it.Attribute())
						}
						return b
					})
					for _, s := range g.spans[i] {
						b = appendMessage(b, 2, func(b []byte) []byte { return appendSpan(b, s) })
					}
					return appendStringField(b, 3, sc.SchemaURL)
				})
			}
			return appendStringField(b, 3, g.res.SchemaURL())
		})
	}
	return b
}

func sameScope(a, b instrumentation.Scope) bool {
	return a.Name == b.Name && a.Version == b.Version && a.SchemaURL == b.SchemaURL &&
		a.Attributes.Equivalent() == b.Attributes.Equivalent()
}

func appendSpan(b []byte, s sdktrace.ReadOnlySpan) []byte {
	sc := s.SpanContext()
	tid, sid := sc.TraceID(), sc.SpanID()
	b = appendBytesField(b, 1, tid[:])
	b = appendBytesField(b, 2, sid[:])
	b = appendStringField(b, 3, sc.TraceState().String())
	if p := s.Parent().SpanID(); p.IsValid() {
		b = appendBytesField(b, 4, p[:])
	}
	b = appendStringField(b, 5, s.Name())
	b = appendVarintField(b, 6, uint64(spanKind(s.SpanKind())))
	b = appendFixed64Field(b, 7, unixNano(s.StartTime().UnixNano()))
	b = appendFixed64Field(b, 8, unixNano(s.EndTime().UnixNano()))
	for _, kv := range s.Attributes() {
		b = appendKeyValue(b, 9, kv)
	}
	b = appendVarintField(b, 10, uint64(clampCount(s.DroppedAttributes())))
	for _, e := range s.Events() {
		b = appendMessage(b, 11, func(b []byte) []byte {
			b = appendFixed64Field(b, 1, unixNano(e.Time.UnixNano()))
			b = appendStringField(b, 2, e.Name)
			for _, kv := range e.Attributes {
				b = appendKeyValue(b, 3, kv)
			}
			return appendVarintField(b, 4, uint64(clampCount(e.DroppedAttributeCount)))
		})
	}
	b = appendVarintField(b, 12, uint64(clampCount(s.DroppedEvents())))
	for _, l := range s.Links() {
		b = appendMessage(b, 13, func(b []byte) []byte {
			ltid, lsid := l.SpanContext.TraceID(), l.SpanContext.SpanID()
			b = appendBytesField(b, 1, ltid[:])
			b = appendBytesField(b, 2, lsid[:])
			b = appendStringField(b, 3, l.SpanContext.TraceState().String())
			for _, kv := range l.Attributes {
				b = appendKeyValue(b, 4, kv)
			}
			b = appendVarintField(b, 5, uint64(clampCount(l.DroppedAttributeCount)))
			return appendFixed32Field(b, 6, spanFlags(l.SpanContext.TraceFlags(), l.SpanContext))
		})
	}
	b = appendVarintField(b, 14, uint64(clampCount(s.DroppedLinks())))
	if st := s.Status(); st.Code != codes.Unset || st.Description != "" {
		b = appendMessage(b, 15, func(b []byte) []byte {
			b = appendStringField(b, 2, st.Description)
			return appendVarintField(b, 3, uint64(statusCode(st.Code)))
		})
	}
	return appendFixed32Field(b, 16, spanFlags(sc.TraceFlags(), s.Parent()))
}

// spanFlags are the W3C trace flags in the low byte, and whether the
// parent (or a link's context) is remote: bit 8 says the bit 9 is known.
func spanFlags(tf trace.TraceFlags, parent trace.SpanContext) uint32 {
	f := uint32(tf) | 0x100
	if parent.IsRemote() {
		f |= 0x200
	}
	return f
}

// spanKind maps the API's kinds to OTLP's, which share their numbers
// (unspecified 0, internal 1, server 2, client 3, producer 4, consumer 5).
func spanKind(k trace.SpanKind) int {
	if k < trace.SpanKindInternal || k > trace.SpanKindConsumer {
		return 0
	}
	return int(k)
}

// statusCode maps the API's codes (unset 0, error 1, ok 2) to OTLP's
// (unset 0, ok 1, error 2).
func statusCode(c codes.Code) int {
	switch c {
	case codes.Ok:
		return 1
	case codes.Error:
		return 2
	}
	return 0
}

func unixNano(n int64) uint64 { return uint64(max(0, n)) }

func clampCount(n int) uint32 { return uint32(min(max(0, n), math.MaxUint32)) }

// appendKeyValue appends a KeyValue as field.
func appendKeyValue(b []byte, field int, kv attribute.KeyValue) []byte {
	return appendMessage(b, field, func(b []byte) []byte {
		b = appendStringField(b, 1, string(kv.Key))
		return appendMessage(b, 2, func(b []byte) []byte { return appendAnyValue(b, kv.Value) })
	})
}

// appendAnyValue writes the body of an AnyValue (string 1, bool 2, int 3,
// double 4, array 5, key-value list 6, bytes 7). A oneof member is written
// even when it is its zero value, so false, 0 and "" keep their type.
func appendAnyValue(b []byte, v attribute.Value) []byte {
	switch v.Type() {
	case attribute.STRING:
		s := v.AsString()
		b = binary.AppendUvarint(appendTag(b, 1, wireBytes), uint64(len(s)))
		return append(b, s...)
	case attribute.BOOL:
		var n uint64
		if v.AsBool() {
			n = 1
		}
		return binary.AppendUvarint(appendTag(b, 2, wireVarint), n)
	case attribute.INT64:
		return binary.AppendUvarint(appendTag(b, 3, wireVarint), uint64(v.AsInt64()))
	case attribute.FLOAT64:
		return binary.LittleEndian.AppendUint64(appendTag(b, 4, wireFixed64), math.Float64bits(v.AsFloat64()))
	case attribute.BYTESLICE:
		bs := v.AsByteSlice()
		b = binary.AppendUvarint(appendTag(b, 7, wireBytes), uint64(len(bs)))
		return append(b, bs...)
	case attribute.BOOLSLICE:
		vs := v.AsBoolSlice()
		return appendArray(b, len(vs), func(i int) attribute.Value { return attribute.BoolValue(vs[i]) })
	case attribute.INT64SLICE:
		vs := v.AsInt64Slice()
		return appendArray(b, len(vs), func(i int) attribute.Value { return attribute.Int64Value(vs[i]) })
	case attribute.FLOAT64SLICE:
		vs := v.AsFloat64Slice()
		return appendArray(b, len(vs), func(i int) attribute.Value { return attribute.Float64Value(vs[i]) })
	case attribute.STRINGSLICE:
		vs := v.AsStringSlice()
		return appendArray(b, len(vs), func(i int) attribute.Value { return attribute.StringValue(vs[i]) })
	case attribute.SLICE:
		vs := v.AsSlice()
		return appendArray(b, len(vs), func(i int) attribute.Value { return vs[i] })
	case attribute.MAP:
		return appendMessage(b, 6, func(b []byte) []byte {
			for _, kv := range v.AsMap() {
				b = appendKeyValue(b, 1, kv)
			}
			return b
		})
	}
	return b // EMPTY: an AnyValue with no member
}

func appendArray(b []byte, n int, at func(int) attribute.Value) []byte {
	return appendMessage(b, 5, func(b []byte) []byte {
		for i := range n {
			b = appendMessage(b, 1, func(b []byte) []byte { return appendAnyValue(b, at(i)) })
		}
		return b
	})
}
