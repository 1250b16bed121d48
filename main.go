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
	root := &cobra.Command{
		Use:           "presenced",
		Short:         "Presence, live viewer counts, waiting rooms, booking and payments in one binary",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	flags := cli.AddConfigFlags(root.PersistentFlags())
	root.AddCommand(
		cli.Serve(flags),
		cli.Migrate(flags),
		cli.Token(flags),
		cli.EventCmd(flags),
		cli.DemoCmd(flags),
		cli.HotelCmd(flags),
		cli.KeysCmd(),
		cli.RolesCmd(),
		cli.Loadgen(),
		cli.VersionCmd(),
	)
	if err := root.ExecuteContext(context.Background()); err != nil {
		fmt.Fprintln(os.Stderr, "presenced:", err)
		os.Exit(1)
	}
}
