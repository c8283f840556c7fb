package buildinfo

import (
	"runtime/debug"
	"testing"
)

func TestFromBuild(t *testing.T) {
	tagged := func() (*debug.BuildInfo, bool) {
		return &debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Path: "frontdoor", Version: "v1.4.0"},
			Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "0123456789abcdef0123"}, {Key: "vcs.modified", Value: "false"}}}, true
	}
	devel := func() (*debug.BuildInfo, bool) {
		return &debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Path: "frontdoor", Version: "(devel)"},
			Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "fedcba9876543210"}, {Key: "vcs.modified", Value: "true"}}}, true
	}
	none := func() (*debug.BuildInfo, bool) { return nil, false }
	for _, tc := range []struct {
		name        string
		ldV, ldR    string
		read        func() (*debug.BuildInfo, bool)
		want, wantS string
	}{
		{"module version", "", "", tagged, "v1.4.0", "v1.4.0 (rev 0123456789ab, go1.26.0)"},
		{"devel with vcs", "", "", devel, "dev", "dev (rev fedcba987654-dirty, go1.26.0)"},
		{"ldflags win", "v2.0.0", "abc", tagged, "v2.0.0", "v2.0.0 (rev abc, go1.26.0)"},
		{"nothing", "", "", none, "dev", ""},
	} {
		in := fromBuild(tc.ldV, tc.ldR, tc.read)
		if in.Version != tc.want {
			t.Errorf("%s: version %q, want %q", tc.name, in.Version, tc.want)
		}
		if tc.wantS != "" && in.String() != tc.wantS {
			t.Errorf("%s: String() %q, want %q", tc.name, in.String(), tc.wantS)
		}
	}
}
