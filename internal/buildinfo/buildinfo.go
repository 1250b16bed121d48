// Package buildinfo says which build a process is: the version and commit
// stamped at build time (see cli.Version), the commit Go recorded from the
// git checkout otherwise, and the Go release. `presenced version` prints
// it and every process exports it as presenced_build_info.
package buildinfo

import (
	"runtime"
	"runtime/debug"
)

var version, commit = "dev", ""

// Stamp records the version and commit given at build time (empty commit:
// take Go's VCS stamp).
func Stamp(v, c string) {
	if v != "" {
		version = v
	}
	commit = c
}

// Info is one build.
type Info struct {
	Version string
	// Commit is the full commit, "-dirty" when built from a modified
	// checkout, or "unknown".
	Commit string
	Go     string
}

// Get returns this build.
func Get() Info {
	c, dirty := commit, false
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			switch {
			case s.Key == "vcs.revision" && c == "":
				c = s.Value
			case s.Key == "vcs.modified" && s.Value == "true":
				dirty = true
			}
		}
	}
	if c == "" {
		c = "unknown"
	} else if dirty && commit == "" {
		c += "-dirty"
	}
	return Info{Version: version, Commit: c, Go: runtime.Version()}
}
