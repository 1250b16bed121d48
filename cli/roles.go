package cli

import (
	"fmt"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/presenced/presenced/app"
)

func roleNames() []string { return app.RoleNames() }

// RolesCmd is `presenced roles`: the role table and what each role starts.
func RolesCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "roles",
		Short: "List the roles and the module parts each starts",
		Example: `  presenced roles
  presenced serve --roles ingest,count   # then run two of them in one process`,
		Args: cobra.NoArgs,
		Run: func(cmd *cobra.Command, _ []string) {
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "ROLE\tHOLDS\tPART\tNEEDS")
			for _, r := range app.Roles() {
				for i, p := range r.Parts {
					name, holds := "", ""
					if i == 0 {
						name, holds = r.Name, r.Holds
					}
					needs := strings.Join(p.Needs, ",")
					if !p.Built {
						needs = "(not built yet)"
					}
					part := p.Name
					if len(p.For) > 0 {
						part += " (for " + strings.Join(p.For, ", ") + ")"
					}
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", name, holds, part, needs)
				}
			}
			fmt.Fprintln(tw, "all\teverything\tevery part above\t")
			_ = tw.Flush()
		},
	}
}
