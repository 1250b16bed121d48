package cli

import (
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"
)

// Version is set at build time: -ldflags "-X github.com/presenced/presenced/cli.Version=v1.2.3".
var Version = "dev"

// VersionCmd is `presenced version`.
func VersionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version",
		Args:  cobra.NoArgs,
		Run: func(cmd *cobra.Command, _ []string) {
			rev := ""
			if bi, ok := debug.ReadBuildInfo(); ok {
				for _, s := range bi.Settings {
					if s.Key == "vcs.revision" {
						rev = " " + s.Value
					}
				}
			}
			printf(cmd, "presenced %s%s (%s %s/%s)\n", Version, rev, runtime.Version(), runtime.GOOS, runtime.GOARCH)
		},
	}
}
