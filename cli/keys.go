package cli

import (
	"time"

	"github.com/spf13/cobra"

	"github.com/presenced/presenced/internal/keyring"
)

// KeysCmd is `presenced keys generate`: an Ed25519 key pair for the settings
// that sign (waitingroom.signing_key, viewers.cookie_signing_key) and those
// that verify (…verify_keys).
func KeysCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "keys", Short: "Signing keys for admission passes and viewer cookies"}
	var kid string
	gen := &cobra.Command{
		Use:   "generate [--kid ID]",
		Short: "Print a new Ed25519 signing key and its public verify key (kid:base64)",
		Example: `  presenced keys generate --kid pass-2027-01
  # signing_key to waitingroom.signing_key on the admit plane,
  # verify_key to waitingroom.verify_keys on the booking plane`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			signing, verify, err := keyring.Generate(kid)
			if err != nil {
				return err
			}
			printf(cmd, "signing_key: %s\nverify_key:  %s\n", signing, verify)
			return nil
		},
	}
	gen.Flags().StringVar(&kid, "kid", time.Now().UTC().Format("2006-01-02"), "key id, carried by every signature for rotation")
	cmd.AddCommand(gen)
	return cmd
}
