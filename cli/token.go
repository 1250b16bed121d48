package cli

import (
	"errors"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/presenced/presenced/app"
	"github.com/presenced/presenced/internal/auth"
)

// Token is `presenced token`: print a development user token, or the API key.
func Token(flags *commonFlags) *cobra.Command {
	var (
		user   string
		ttl    time.Duration
		rooms  []string
		apiKey bool
	)
	cmd := &cobra.Command{
		Use:   "token --user NAME [--ttl 1h] [--rooms a,b] | token --api-key",
		Short: "Print a development user JWT signed with the active secret, or the active API key",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := flags.load(cmd)
			if err != nil {
				return err
			}
			if _, err := app.ResolveSecrets(&cfg); err != nil {
				return err
			}
			if apiKey {
				if cfg.Auth.APIKey == "" {
					return errors.New("no API key: set auth.api_key (PRESENCED_API_KEY) or enable auth.dev_secrets")
				}
				printf(cmd, "%s\n", cfg.Auth.APIKey)
				return nil
			}
			if strings.TrimSpace(user) == "" {
				return errors.New("--user is required (or --api-key)")
			}
			if ttl <= 0 {
				return errors.New("--ttl must be positive")
			}
			tok, err := auth.SignDev(cfg.Auth.JWTSecret, user, ttl, rooms, cfg.Auth.Issuer, cfg.Auth.Audience)
			if err != nil {
				return err
			}
			printf(cmd, "%s\n", tok)
			return nil
		},
	}
	cmd.Flags().StringVar(&user, "user", "", "user id (the sub claim)")
	cmd.Flags().DurationVar(&ttl, "ttl", time.Hour, "token lifetime")
	cmd.Flags().StringSliceVar(&rooms, "rooms", nil, "rooms claim (presence visibility)")
	cmd.Flags().BoolVar(&apiKey, "api-key", false, "print the server-to-server API key instead")
	return cmd
}
