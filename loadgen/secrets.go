package loadgen

import (
	"fmt"
	"os"
	"time"

	"github.com/spf13/pflag"

	"github.com/presenced/presenced/internal/auth"
)

// Secrets are what a scenario needs to act as the server's users and
// admins: the API key and the HS256 user-token secret.
type Secrets struct {
	APIKey    string
	JWTSecret string
	DataDir   string
}

// AddFlags registers --api-key, --jwt-secret and --data-dir.
func (s *Secrets) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&s.APIKey, "api-key", "", "server API key (default: PRESENCED_API_KEY or the data folder's development secrets)")
	fs.StringVar(&s.JWTSecret, "jwt-secret", "", "HS256 user-token secret (default: PRESENCED_JWT_SECRET or the development secrets)")
	dataDir := os.Getenv("PRESENCED_DATA_DIR") // where `presenced serve` keeps it too
	if dataDir == "" {
		dataDir = "./var"
	}
	fs.StringVar(&s.DataDir, "data-dir", dataDir, "data folder of a development server, for its secrets (default $PRESENCED_DATA_DIR or ./var)")
}

// Resolve fills what the flags left empty from the environment, then from a
// development server's data folder (never creating secrets there).
func (s *Secrets) Resolve() error {
	if s.APIKey == "" {
		s.APIKey = os.Getenv("PRESENCED_API_KEY")
	}
	if s.JWTSecret == "" {
		s.JWTSecret = os.Getenv("PRESENCED_JWT_SECRET")
	}
	if s.APIKey != "" && s.JWTSecret != "" {
		return nil
	}
	dev, err := auth.ReadDevSecrets(s.DataDir)
	if err != nil {
		return fmt.Errorf("no --api-key/--jwt-secret and no development secrets in %s: %w", s.DataDir, err)
	}
	if s.APIKey == "" {
		s.APIKey = dev.APIKey
	}
	if s.JWTSecret == "" {
		s.JWTSecret = dev.JWTSecret
	}
	return nil
}

// UserToken mints a two-hour user token with the resolved secret.
func (s *Secrets) UserToken(user string) (string, error) {
	return auth.SignDev(s.JWTSecret, user, 2*time.Hour, nil, "", "")
}
