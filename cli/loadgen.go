package cli

import (
	"github.com/spf13/cobra"

	"github.com/presenced/presenced/loadgen"
	bookingload "github.com/presenced/presenced/loadgen/booking"
	presenceload "github.com/presenced/presenced/loadgen/presence"
	staysload "github.com/presenced/presenced/loadgen/stays"
	viewersload "github.com/presenced/presenced/loadgen/viewers"
	waitingroomload "github.com/presenced/presenced/loadgen/waitingroom"
)

// scenarios lists every load scenario; a module adds its own here.
func scenarios() []loadgen.Scenario {
	return []loadgen.Scenario{
		loadgen.NewHTTP(),
		bookingload.New(),
		presenceload.New(),
		staysload.New(),
		viewersload.New(),
		waitingroomload.New(),
	}
}

// Loadgen is `presenced loadgen <scenario>`.
func Loadgen() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "loadgen <scenario>",
		Short: "Generate bounded load against a presenced on this machine and summarise it",
	}
	for _, s := range scenarios() {
		var o loadgen.Options
		sub := &cobra.Command{
			Use:   s.Name(),
			Short: s.Describe(),
			Args:  cobra.NoArgs,
			RunE: func(cmd *cobra.Command, _ []string) error {
				sum, err := loadgen.Execute(cmd.Context(), s, o, cmd.ErrOrStderr())
				if err != nil {
					return err
				}
				return sum.Write(cmd.OutOrStdout(), o.JSON)
			},
		}
		o.AddFlags(sub.Flags())
		s.Flags(sub.Flags())
		cmd.AddCommand(sub)
	}
	return cmd
}
