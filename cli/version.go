package cli

import (
	"fmt"
	"runtime"
	"strings"

	"github.com/spf13/cobra"

	"github.com/presenced/presenced/internal/buildinfo"
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

func init() { buildinfo.Stamp(Version, Commit) }

// VersionString is what `presenced version` and `presenced --version` print.
func VersionString() string {
	bi := buildinfo.Get()
	commit := bi.Commit
	if commit == "unknown" {
		commit = "unknown commit"
	} else if base, dirty := strings.CutSuffix(commit, "-dirty"); len(base) > 12 {
		commit = base[:12]
		if dirty {
			commit += "-dirty"
		}
	}
	return fmt.Sprintf("presenced %s (%s, %s %s/%s)", bi.Version, commit, bi.Go, runtime.GOOS, runtime.GOARCH)
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
