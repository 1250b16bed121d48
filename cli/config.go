package cli

import (
	"fmt"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/presenced/presenced/app"
	"github.com/presenced/presenced/config"
)

// ConfigCmd is `presenced config`: print the effective configuration, or
// check a file before a deployment uses it.
func ConfigCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "config", Short: "Print the effective configuration, or check a configuration file"}
	cmd.AddCommand(configPrint(), configCheck())
	return cmd
}

func configPrint() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "print",
		Short: "Print every setting with its value and where it came from (secrets redacted)",
		Long: `Print the configuration a server started the same way would run with:
every key, its value, and the layer that set it (default, the file, an
environment variable, a flag). Secrets are shown as <redacted> and
passwords inside URLs as xxxxx. A development server fills empty secrets
from its data folder at start; those show as empty here.`,
		Example: `  presenced config print
  presenced config print --config /etc/presenced.yaml --roles booking
  PRESENCED_LOG_LEVEL=debug presenced config print | grep log.`,
		Args: cobra.NoArgs,
	}
	flags := configFlags(cmd, flagListen, flagRoles, flagRedis, flagPostgres)
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		settings, _, err := config.Explain(flags.source(cmd))
		if err != nil {
			return err
		}
		tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "KEY\tVALUE\tSOURCE")
		for _, s := range settings {
			fmt.Fprintf(tw, "%s\t%s\t%s\n", s.Key, s.Value, s.Source)
		}
		return tw.Flush()
	}
	return cmd
}

func configCheck() *cobra.Command {
	return &cobra.Command{
		Use:   "check FILE",
		Short: "Check a configuration file: known keys, values that parse and make sense, valid roles",
		Long: `Check FILE as a server would read it over the defaults (environment
variables and flags are left out, so the file is judged alone): unknown
keys, values that do not parse, values that make no sense together, and
unknown roles. Prints "FILE: ok", or every problem of the file, one a line,
and exits 1 on any.`,
		Example: `  presenced config check deploy/presenced.production.yaml
  presenced config check config.yaml && kubectl apply -f ...`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, problems, err := config.Check(args[0])
			if err != nil {
				return fmt.Errorf("%s: %w", args[0], err)
			}
			if _, _, err := app.ResolveRoles(cfg.Roles); err != nil {
				problems = append(problems, "roles: "+err.Error())
			}
			switch len(problems) {
			case 0:
				printf(cmd, "%s: ok\n", args[0])
				return nil
			case 1:
				return fmt.Errorf("%s: %s", args[0], problems[0])
			}
			cmd.SilenceUsage = true // the file is at fault, not the command line
			for _, p := range problems {
				printf(cmd, "%s: %s\n", args[0], p)
			}
			return fmt.Errorf("%s: %d problems", args[0], len(problems))
		},
	}
}
