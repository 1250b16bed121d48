package cli

import (
	"github.com/spf13/cobra"

	"github.com/presenced/presenced/loadgen"
	bookingload "github.com/presenced/presenced/loadgen/booking"
	"github.com/presenced/presenced/loadgen/mixed"
	paymentsload "github.com/presenced/presenced/loadgen/payments"
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
		paymentsload.New(),
		presenceload.New(),
		staysload.New(),
		viewersload.New(),
		waitingroomload.New(),
		mixed.New(mixed.Default(
			func() loadgen.Scenario { return presenceload.New() },
			func() loadgen.Scenario { return viewersload.New() },
			func() loadgen.Scenario { return waitingroomload.New() },
			func() loadgen.Scenario { return paymentsload.New() },
		)...),
	}
}

// Loadgen is `presenced loadgen <scenario>`.
func Loadgen() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "loadgen <scenario>",
		Short: "Generate bounded load against a presenced on this machine and summarise it",
		Long: `Generate bounded load against a presenced on this machine and summarise it.
Each scenario runs for --duration (the load window; setup before it and
result checks after it are extra and reported apart) and exits with status 1
when more than --max-errors of its operations failed.`,
		Example: `  presenced loadgen http -d 5s
  presenced loadgen viewers --viewers 20000 --hotels 1000 -d 30s
  presenced loadgen waitingroom --json > run.json
  presenced loadgen presence --users 10000 --follow 20 --changes 1000 -d 30s
  presenced loadgen mixed -d 30m --postgres-url postgres://...`,
	}
	for _, s := range scenarios() {
		var o loadgen.Options
		sub := &cobra.Command{
			Use:   s.Name(),
			Short: s.Describe(),
			Args:  cobra.NoArgs,
			RunE: func(cmd *cobra.Command, _ []string) error {
				return loadgen.Main(cmd.Context(), s, o, cmd.OutOrStdout(), cmd.ErrOrStderr())
			},
		}
		o.AddFlags(sub.Flags())
		s.Flags(sub.Flags())
		cmd.AddCommand(sub)
	}
	return cmd
}
