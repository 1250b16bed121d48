package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/presenced/presenced/app"
)

func roleNames() []string { return app.RoleNames() }

// RolesCmd is `presenced roles`: the role table and what each role starts.
func RolesCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "roles",
		Short: "List the roles, the module parts each starts, and the stores and secrets each needs",
		Long: `List the roles, the module parts each starts, and the stores and secret
groups a process of each must be given. --json prints the same table for
deployment tooling: the Helm chart, the split cluster, docker-compose.yml
and docs/operations.md are checked against it.`,
		Example: `  presenced roles
  presenced roles --json
  presenced serve --roles ingest,count   # then run two of them in one process`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if asJSON {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				return enc.Encode(app.RoleTable())
			}
			printRoles(cmd.OutOrStdout())
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the table as JSON")
	return cmd
}

// printRoles prints the table for people: one line a part, and under
// each role the secret groups a process of it must be given.
func printRoles(w io.Writer) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ROLE\tHOLDS\tPART\tNEEDS")
	for _, r := range app.Roles() {
		for i, p := range r.Parts {
			name, holds := "", ""
			if i == 0 {
				name, holds = r.Name, r.Holds
			}
			needs := strings.Join(append(slices.Clone(p.Needs), p.Secrets...), ",")
			if !p.Built {
				needs = "(not built yet)"
			}
			part := p.Name
			if len(p.For) > 0 {
				part += " (for " + strings.Join(p.For, ", ") + ")"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", name, holds, part, needs)
		}
		fmt.Fprintf(tw, "\t\tsecrets given to the process\t%s\n", strings.Join(r.Secrets, ","))
	}
	fmt.Fprintln(tw, "all\teverything\tevery part above\t")
	_ = tw.Flush()
}
