// Package buildinfo reports the version and VCS revision of the running
// binary: from -ldflags when set, else from the module's build info.
//
//	go build -ldflags "-X frontdoor/internal/buildinfo.version=v1.2.3 -X frontdoor/internal/buildinfo.revision=abc123"
package buildinfo

import (
	"runtime"
	"runtime/debug"
	"sync"
)

// Set with -ldflags -X; empty means "read the build info".
var version, revision string

// Info is what the binary knows about its build.
type Info struct {
	Version   string // a module version (v1.2.3, or a pseudo-version), or "dev"
	Revision  string // the VCS revision, "" when unknown
	Modified  bool   // built from a checkout with uncommitted changes
	GoVersion string
}

var get = sync.OnceValue(func() Info {
	return fromBuild(version, revision, debug.ReadBuildInfo)
})

// Get returns the build's Info.
func Get() Info { return get() }

func fromBuild(ldVersion, ldRevision string, read func() (*debug.BuildInfo, bool)) Info {
	in := Info{Version: ldVersion, Revision: ldRevision, GoVersion: runtime.Version()}
	if bi, ok := read(); ok {
		if in.Version == "" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			in.Version = bi.Main.Version
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				if in.Revision == "" {
					in.Revision = s.Value
				}
			case "vcs.modified":
				in.Modified = ldRevision == "" && s.Value == "true"
			}
		}
		if bi.GoVersion != "" {
			in.GoVersion = bi.GoVersion
		}
	}
	if in.Version == "" {
		in.Version = "dev"
	}
	return in
}

// String is the one-line form: "v1.2.3 (rev abc123def456, go1.26.0)".
func (in Info) String() string {
	s := in.Version
	if in.Revision != "" {
		rev := in.Revision
		if len(rev) > 12 {
			rev = rev[:12]
		}
		if in.Modified {
			rev += "-dirty"
		}
		s += " (rev " + rev + ", " + in.GoVersion + ")"
	} else {
		s += " (" + in.GoVersion + ")"
	}
	return s
}
