// presenced is one binary for the real-time, high-contention edge of a
// consumer product: presence, live viewer counts, waiting rooms, booking and
// payments. See README.md.
package main

import (
	"context"
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/presenced/presenced/cli"
)

func main() {
	if err := newRoot().ExecuteContext(context.Background()); err != nil {
		fmt.Fprintln(os.Stderr, "presenced:", err)
		os.Exit(1)
	}
}

// newRoot is the command tree, every subcommand under presenced.
func newRoot() *cobra.Command {
	root := &cobra.Command{
		Use:   "presenced",
		Short: "Presence, live viewer counts, waiting rooms, booking and payments in one binary",
		Example: `  presenced serve                      # a development server with every role
  presenced token --user alice         # a user JWT for that server
  presenced loadgen viewers -d 30s     # load it
  presenced roles                      # what each --roles plane starts`,
		Version:       cli.VersionString(),
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetVersionTemplate("{{.Version}}\n")
	root.AddCommand(
		cli.Serve(),
		cli.DrainCmd(),
		cli.HealthcheckCmd(),
		cli.Migrate(),
		cli.Token(),
		cli.ConfigCmd(),
		cli.EventCmd(),
		cli.DemoCmd(),
		cli.HotelCmd(),
		cli.KeysCmd(),
		cli.RolesCmd(),
		cli.CheckCmd(),
		cli.ManifestCmd(),
		cli.GateCmd(),
		cli.Loadgen(),
		cli.VersionCmd(),
	)
	return root
}
