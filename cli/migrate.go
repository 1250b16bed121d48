package cli

import (
	"github.com/spf13/cobra"

	"github.com/presenced/presenced/app"
	"github.com/presenced/presenced/store"
)

// Migrate is `presenced migrate`: apply pending schema migrations.
func Migrate() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "migrate",
		Short: "Apply pending database migrations (safe to run from several processes at once)",
		Example: `  presenced migrate --postgres-url postgres://presenced@db:5432/presenced
  PRESENCED_POSTGRES_URL=postgres://presenced@db/presenced presenced migrate`,
		Args: cobra.NoArgs,
	}
	flags := configFlags(cmd, flagPostgres)
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		// The schema is the store's, no module's: no part, the main pool.
		return withCommand(cmd, flags, nil, func(a *app.App) error {
			pool, err := a.Postgres(cmd.Context(), store.PoolMain)
			if err != nil {
				return err
			}
			all, err := store.ReadMigrations(store.Migrations())
			if err != nil {
				return err
			}
			pending, err := store.PendingMigrations(cmd.Context(), pool, store.Migrations())
			if err != nil {
				return err
			}
			printf(cmd, "schema up to date: %d migrations, %d pending\n", len(all), len(pending))
			return nil
		})
	}
	return cmd
}
