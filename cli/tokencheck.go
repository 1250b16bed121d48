package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/spf13/cobra"

	"github.com/presenced/presenced/internal/auth"
)

// tokenCheck is `presenced token check TOKEN`: what the server would say
// of a user token, and why.
func tokenCheck() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "check TOKEN|-",
		Short: "Say whether the server would accept a user token, and why not",
		Long: `Verify TOKEN (or - to read it from stdin) exactly as the server's user
APIs and sockets do, with the configuration this command reads: the
algorithm, the signature (auth.jwt_secret, the development secrets of
the data folder, or auth.jwks_url), expiry (30 s leeway), issuer,
audience and the user-id rule for sub. Prints what the token claims and
the verdict; exits 1 when the server would refuse it.`,
		Example: `  presenced token check "$(presenced token --user alice)"
  pbpaste | presenced token check - --config /etc/presenced.yaml`,
		Args: cobra.ExactArgs(1),
	}
	flags := configFlags(cmd)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		tok := strings.TrimSpace(args[0])
		if tok == "-" {
			b, err := io.ReadAll(io.LimitReader(cmd.InOrStdin(), 64<<10))
			if err != nil {
				return fmt.Errorf("read the token: %w", err)
			}
			tok = strings.TrimSpace(string(b))
		}
		tok = strings.TrimPrefix(tok, "Bearer ")
		cfg, err := flags.load(cmd)
		if err != nil {
			return err
		}
		keySource := "auth.jwks_url " + cfg.Auth.JWKSURL
		if cfg.Auth.JWKSURL == "" {
			if keySource, err = tokenSecrets(&cfg, false, false); err != nil {
				return err
			}
		}
		w := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 0, 2, ' ', 0)
		describeToken(w, tok)
		fmt.Fprintf(w, "verified with\t%s\n", keySource)
		ctx, cancel := context.WithTimeout(cmd.Context(), 10*time.Second)
		defer cancel()
		v, err := auth.NewVerifier(ctx, cfg.Auth)
		if err != nil {
			return err
		}
		claims, verr := v.Verify(tok)
		if verr != nil {
			fmt.Fprintf(w, "verdict\trefused: %s\n", explainRefusal(verr, tok, cfg.Auth.Issuer, cfg.Auth.Audience))
			_ = w.Flush()
			return errors.New("the server would refuse this token")
		}
		fmt.Fprintf(w, "verdict\taccepted: user %q", claims.Subject)
		if len(claims.Rooms) > 0 {
			fmt.Fprintf(w, " in rooms %s", strings.Join(claims.Rooms, ", "))
		}
		if claims.ExpiresAt != nil {
			fmt.Fprintf(w, ", for %s more", time.Until(claims.ExpiresAt.Time).Round(time.Second))
		}
		fmt.Fprintln(w)
		return w.Flush()
	}
	return cmd
}

// describeToken prints what the token says of itself, unverified.
func describeToken(w io.Writer, tok string) {
	claims := &auth.Claims{}
	t, _, err := jwt.NewParser().ParseUnverified(tok, claims)
	if err != nil {
		fmt.Fprintf(w, "token\tnot a JWT: %v\n", err)
		return
	}
	kid, _ := t.Header["kid"].(string)
	fmt.Fprintf(w, "algorithm\t%s\n", t.Method.Alg())
	if kid != "" {
		fmt.Fprintf(w, "key id\t%s\n", kid)
	}
	fmt.Fprintf(w, "sub\t%q\n", claims.Subject)
	if len(claims.Rooms) > 0 {
		fmt.Fprintf(w, "rooms\t%s\n", strings.Join(claims.Rooms, ", "))
	}
	if claims.Issuer != "" {
		fmt.Fprintf(w, "iss\t%s\n", claims.Issuer)
	}
	if len(claims.Audience) > 0 {
		fmt.Fprintf(w, "aud\t%s\n", strings.Join(claims.Audience, ", "))
	}
	if claims.IssuedAt != nil {
		fmt.Fprintf(w, "issued\t%s\n", claims.IssuedAt.UTC().Format(time.RFC3339))
	}
	if claims.ExpiresAt != nil {
		fmt.Fprintf(w, "expires\t%s\n", claims.ExpiresAt.UTC().Format(time.RFC3339))
	}
}

// explainRefusal turns a verification error into the reason a person can
// act on.
func explainRefusal(err error, tok, issuer, audience string) string {
	claims := &auth.Claims{}
	_, _, _ = jwt.NewParser().ParseUnverified(tok, claims)
	switch {
	case errors.Is(err, jwt.ErrTokenMalformed):
		return "not a well-formed JWT"
	case errors.Is(err, jwt.ErrTokenSignatureInvalid):
		return "the signature does not verify with the server's key: signed with another secret or key"
	case errors.Is(err, jwt.ErrTokenUnverifiable):
		return "the server accepts no such algorithm or key: " + err.Error()
	case errors.Is(err, jwt.ErrTokenRequiredClaimMissing):
		return "a required claim is missing (exp always; iss and aud when the server checks them): " + err.Error()
	case errors.Is(err, jwt.ErrTokenExpired) && claims.ExpiresAt != nil:
		return fmt.Sprintf("expired at %s, %s ago", claims.ExpiresAt.UTC().Format(time.RFC3339),
			time.Since(claims.ExpiresAt.Time).Round(time.Second))
	case errors.Is(err, jwt.ErrTokenNotValidYet):
		return "not valid yet (nbf or iat in the future)"
	case errors.Is(err, jwt.ErrTokenInvalidIssuer):
		return fmt.Sprintf("iss is %q, the server wants %q (auth.issuer)", claims.Issuer, issuer)
	case errors.Is(err, jwt.ErrTokenInvalidAudience):
		return fmt.Sprintf("aud is %v, the server wants %q (auth.audience)", []string(claims.Audience), audience)
	}
	return err.Error()
}
