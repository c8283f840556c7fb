// Package units holds the config value types shared by every package:
// durations written as "2s" and byte sizes written as "512MiB".
package units

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// Duration is a time.Duration that YAML reads from strings like "50ms" or "10m".
type Duration time.Duration

// D returns the value as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

// String formats the duration the way time.Duration does.
func (d Duration) String() string { return time.Duration(d).String() }

// UnmarshalYAML accepts a Go duration string, or 0.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return typeError(n, "expected a duration such as 2s, got a %s", kindName(n.Kind))
	}
	if n.Value == "0" {
		*d = 0
		return nil
	}
	v, err := time.ParseDuration(n.Value)
	if err != nil {
		return typeError(n, "invalid duration %q (use units such as 50ms, 2s, 10m)", n.Value)
	}
	*d = Duration(v)
	return nil
}

// MarshalYAML writes the duration as a string.
func (d Duration) MarshalYAML() (any, error) { return d.String(), nil }

// Bytes is a byte count that YAML reads from "512MiB", "1GB", "4096" and similar.
type Bytes int64

var byteUnits = []struct {
	suffix string
	mult   int64
}{
	{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40},
	{"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12},
	{"K", 1 << 10}, {"M", 1 << 20}, {"G", 1 << 30},
	{"B", 1},
}

// ParseBytes parses a size such as "512MiB" (binary), "1GB" (decimal) or "4096".
func ParseBytes(s string) (Bytes, error) {
	s = strings.TrimSpace(s)
	num, mult := s, int64(1)
	for _, u := range byteUnits {
		if strings.HasSuffix(s, u.suffix) {
			num, mult = strings.TrimSpace(strings.TrimSuffix(s, u.suffix)), u.mult
			break
		}
	}
	f, err := strconv.ParseFloat(num, 64)
	if err != nil || f < 0 {
		return 0, fmt.Errorf("invalid size %q (use a number with an optional unit such as KiB, MiB, GiB, MB)", s)
	}
	return Bytes(f * float64(mult)), nil
}

// UnmarshalYAML accepts an integer or a string with a unit.
func (b *Bytes) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return typeError(n, "expected a size such as 512MiB, got a %s", kindName(n.Kind))
	}
	v, err := ParseBytes(n.Value)
	if err != nil {
		return typeError(n, "%s", err.Error())
	}
	*b = v
	return nil
}

// MarshalYAML writes the size as a plain integer.
func (b Bytes) MarshalYAML() (any, error) { return int64(b), nil }

// typeError is a *yaml.TypeError naming n's line: yaml.v3 then goes on
// decoding and reports it with every other problem, where a plain error
// would stop it.
func typeError(n *yaml.Node, format string, a ...any) error {
	return &yaml.TypeError{Errors: []string{fmt.Sprintf("line %d: ", n.Line) + fmt.Sprintf(format, a...)}}
}

func kindName(k yaml.Kind) string {
	switch k {
	case yaml.MappingNode:
		return "mapping"
	case yaml.SequenceNode:
		return "list"
	default:
		return "scalar"
	}
}
