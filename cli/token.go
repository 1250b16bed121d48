package cli

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/presenced/presenced/config"
	"github.com/presenced/presenced/internal/auth"
)

// Token is `presenced token`: print a development user token, or the API key.
func Token() *cobra.Command {
	var (
		user          string
		ttl           time.Duration
		rooms         []string
		apiKey        bool
		createSecrets bool
	)
	cmd := &cobra.Command{
		Use:   "token --user NAME [--ttl 1h] [--rooms a,b] | token --api-key",
		Short: "Print a development user JWT signed with the server's secret, or its API key",
		Long: `Print a user JWT signed with the secret the server uses, or the server's
API key. The secret is auth.jwt_secret (PRESENCED_JWT_SECRET) when set;
otherwise the development secrets the server created in its data folder
(data_dir/dev-secrets.json). Run it from the server's folder or point
--data-dir at the server's data_dir; it never creates secrets unless told
to with --create-secrets. Which secret it used goes to stderr.`,
		Example: `  presenced token --user alice                        # beside a development server
  presenced token --user alice --data-dir ~/presenced/var
  presenced token --user alice --rooms team-a --ttl 10m
  presenced token --api-key                           # the server-to-server key
  curl -H "Authorization: Bearer $(presenced token --user alice)" localhost:8080/v1/presence/users/bob`,
		Args: cobra.NoArgs,
	}
	flags := configFlags(cmd)
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		if !apiKey {
			// The rule the server applies to every token's subject.
			if err := auth.ValidUserID(user); err != nil {
				return fmt.Errorf("--user: %w", err)
			}
			if ttl <= 0 {
				return errors.New("--ttl must be positive")
			}
		}
		cfg, err := flags.load(cmd)
		if err != nil {
			return err
		}
		source, err := tokenSecrets(&cfg, apiKey, createSecrets)
		if err != nil {
			return err
		}
		fmt.Fprintf(cmd.ErrOrStderr(), "presenced token: using %s\n", source)
		if apiKey {
			printf(cmd, "%s\n", cfg.Auth.APIKey)
			return nil
		}
		tok, err := auth.SignDev(cfg.Auth.JWTSecret, user, ttl, rooms, cfg.Auth.Issuer, cfg.Auth.Audience)
		if err != nil {
			return err
		}
		printf(cmd, "%s\n", tok)
		return nil
	}
	cmd.Flags().StringVar(&user, "user", "", "user id (the sub claim)")
	cmd.Flags().DurationVar(&ttl, "ttl", time.Hour, "token lifetime")
	cmd.Flags().StringSliceVar(&rooms, "rooms", nil, "rooms claim (presence visibility)")
	cmd.Flags().BoolVar(&apiKey, "api-key", false, "print the server-to-server API key instead")
	cmd.Flags().BoolVar(&createSecrets, "create-secrets", false, "create development secrets in the data folder when there are none (a server already running elsewhere will not accept tokens signed with them)")
	cmd.AddCommand(tokenCheck())
	return cmd
}

// tokenSecrets fills the JWT secret or API key from the configuration, or
// else from the development secrets file, and says which it used.
func tokenSecrets(cfg *config.Config, apiKey, create bool) (string, error) {
	a := &cfg.Auth
	switch {
	case apiKey && a.APIKey != "":
		return "auth.api_key from the configuration", nil
	case !apiKey && a.JWTSecret != "":
		return "auth.jwt_secret from the configuration", nil
	case !apiKey && a.JWKSURL != "":
		return "", errors.New("the server verifies tokens with auth.jwks_url: get tokens from that identity provider")
	case !a.DevSecrets:
		return "", errors.New("no auth.jwt_secret / auth.api_key configured and auth.dev_secrets is off: set them (PRESENCED_JWT_SECRET, PRESENCED_API_KEY)")
	}
	path, err := filepath.Abs(filepath.Join(cfg.DataDir, auth.DevSecretsFile))
	if err != nil {
		return "", err
	}
	s, err := auth.ReadDevSecrets(cfg.DataDir)
	created := false
	if errors.Is(err, fs.ErrNotExist) {
		if !create {
			return "", fmt.Errorf("no development secrets at %s: run this beside the server (or pass --data-dir with its data_dir), or pass --create-secrets to make new ones", path)
		}
		s, err = auth.LoadOrCreateDevSecrets(cfg.DataDir)
		created = true
	}
	if err != nil {
		return "", err
	}
	a.JWTSecret, a.APIKey = s.JWTSecret, s.APIKey
	if created {
		return "new development secrets created at " + path, nil
	}
	return "development secrets from " + path, nil
}
