package cli

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"
)

// Version and Commit are stamped at build time, as the Dockerfile does:
//
//	go build -ldflags "-X github.com/presenced/presenced/cli.Version=v1.2.3 -X github.com/presenced/presenced/cli.Commit=$(git rev-parse HEAD)"
//
// Without them the commit comes from the VCS stamp Go adds to builds in a
// git checkout (go build, not go run; not with -buildvcs=false).
var (
	Version = "dev"
	Commit  = ""
)

// VersionString is what `presenced version` and `presenced --version` print.
func VersionString() string {
	commit, dirty := Commit, false
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			switch {
			case s.Key == "vcs.revision" && commit == "":
				commit = s.Value
			case s.Key == "vcs.modified" && s.Value == "true":
				dirty = true
			}
		}
	}
	switch {
	case commit == "":
		commit = "unknown commit"
	case len(commit) > 12:
		commit = commit[:12]
	}
	if dirty && Commit == "" {
		commit += "-dirty"
	}
	return fmt.Sprintf("presenced %s (%s, %s %s/%s)", Version, commit, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}

// VersionCmd is `presenced version`.
func VersionCmd() *cobra.Command {
	return &cobra.Command{
		Use:     "version",
		Short:   "Print the version and the commit it was built from",
		Example: "  presenced version\n  presenced --version",
		Args:    cobra.NoArgs,
		Run: func(cmd *cobra.Command, _ []string) {
			printf(cmd, "%s\n", VersionString())
		},
	}
}
