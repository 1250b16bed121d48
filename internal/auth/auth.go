// Package auth verifies user JWTs and server-to-server API keys, and mints
// development tokens.
package auth

import (
	"context"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/MicahParks/keyfunc/v3"
	"github.com/golang-jwt/jwt/v5"
	"github.com/labstack/echo/v4"

	"github.com/presenced/presenced/config"
	"github.com/presenced/presenced/internal/validate"
	"github.com/presenced/presenced/web/wire"
)

// Claims are the claims presenced reads from a user token.
type Claims struct {
	jwt.RegisteredClaims
	// Rooms the user is in (chat rooms, documents); presence shows members
	// of a shared room to each other.
	Rooms []string `json:"rooms,omitempty"`
}

// Asymmetric algorithms accepted from a JWKS; HS256 is accepted only with the
// configured secret, so a public key can never be used as an HMAC secret.
var jwksMethods = []string{"RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "EdDSA"}

// leeway is the clock skew allowed on exp and nbf.
const leeway = 30 * time.Second

// Verifier checks user tokens.
type Verifier struct {
	secret   []byte
	jwks     keyfunc.Keyfunc
	issuer   string
	audience string
	methods  []string
}

// NewVerifier builds a verifier from an HS256 secret, a JWKS URL, or both.
// The JWKS is fetched in the background and refreshed every cfg.JWKSRefresh
// until ctx ends.
func NewVerifier(ctx context.Context, cfg config.Auth) (*Verifier, error) {
	v := &Verifier{secret: []byte(cfg.JWTSecret), issuer: cfg.Issuer, audience: cfg.Audience}
	if cfg.JWTSecret != "" {
		if len(cfg.JWTSecret) < 32 {
			return nil, errors.New("auth.jwt_secret: use at least 32 characters")
		}
		v.methods = append(v.methods, "HS256")
	}
	if cfg.JWKSURL != "" {
		k, err := keyfunc.NewDefaultOverrideCtx(ctx, []string{cfg.JWKSURL}, keyfunc.Override{RefreshInterval: cfg.JWKSRefresh})
		if err != nil {
			return nil, fmt.Errorf("auth.jwks_url: %w", err)
		}
		v.jwks = k
		v.methods = append(v.methods, jwksMethods...)
	}
	if len(v.methods) == 0 {
		return nil, errors.New("auth: no auth.jwt_secret or auth.jwks_url configured")
	}
	return v, nil
}

// ErrInvalidToken wraps every reason a token is refused.
var ErrInvalidToken = errors.New("invalid token")

// Verify parses and checks a token: signature, algorithm, expiry, and issuer
// and audience when configured.
func (v *Verifier) Verify(token string) (*Claims, error) {
	claims, err := v.parse(token)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidToken, err)
	}
	for _, room := range claims.Rooms {
		if err := validate.Token("rooms claim", room, MaxRoomBytes); err != nil {
			return nil, fmt.Errorf("%w: %v", ErrInvalidToken, err)
		}
	}
	if len(claims.Rooms) > MaxRooms {
		return nil, fmt.Errorf("%w: more than %d rooms", ErrInvalidToken, MaxRooms)
	}
	if err := ValidUserID(claims.Subject); err != nil {
		return nil, fmt.Errorf("%w: sub claim: %v", ErrInvalidToken, err)
	}
	return claims, nil
}

// parse checks a token's signature, algorithm and times with golang-jwt.
// A hand-written HS256 path beside it (211 lines) was measured against it
// end to end and removed: it was no faster in a burst of 10,000 connects
// (docs/http.md).
func (v *Verifier) parse(token string) (*Claims, error) {
	opts := []jwt.ParserOption{jwt.WithValidMethods(v.methods), jwt.WithExpirationRequired(), jwt.WithLeeway(leeway)}
	if v.issuer != "" {
		opts = append(opts, jwt.WithIssuer(v.issuer))
	}
	if v.audience != "" {
		opts = append(opts, jwt.WithAudience(v.audience))
	}
	claims := &Claims{}
	parsed, err := jwt.ParseWithClaims(token, claims, v.key, opts...)
	if err != nil {
		return nil, err
	}
	if err := numericTimes(parsed); err != nil {
		return nil, err
	}
	return claims, nil
}

// Limits of the rooms claim.
const (
	MaxRooms     = 256
	MaxRoomBytes = 128
)

// numericTimes refuses exp, nbf and iat given as JSON strings: RFC 7519
// makes them NumericDates (numbers), and the JWT library also reads "123".
func numericTimes(t *jwt.Token) error {
	parts := strings.Split(t.Raw, ".")
	if len(parts) != 3 {
		return errors.New("malformed token")
	}
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return fmt.Errorf("payload: %w", err)
	}
	var raw map[string]json.RawMessage
	if err := wire.LooseJSON(payload, &raw); err != nil {
		return fmt.Errorf("payload: %w", err)
	}
	for _, name := range []string{"exp", "nbf", "iat"} {
		if v, ok := raw[name]; ok && (len(v) == 0 || !strings.ContainsRune("-0123456789", rune(v[0]))) {
			return fmt.Errorf("%s must be a number", name)
		}
	}
	return nil
}

func (v *Verifier) key(t *jwt.Token) (any, error) {
	if t.Method.Alg() == "HS256" {
		if len(v.secret) == 0 {
			return nil, errors.New("HS256 tokens are not accepted")
		}
		return v.secret, nil
	}
	if v.jwks == nil {
		return nil, fmt.Errorf("%s tokens need auth.jwks_url", t.Method.Alg())
	}
	return v.jwks.Keyfunc(t)
}

type claimsKey struct{}

// TokenFromRequest takes the bearer token from the one Authorization
// header or, only for WebSocket upgrades and EventSource streams (browsers
// cannot set headers there), from ?token=. Elsewhere a token in the URL is
// ignored: URLs end up in access logs, proxies and browser history. Two
// Authorization headers are no token: which one a proxy checked is unknown.
func TokenFromRequest(r *http.Request) string {
	switch hs := r.Header.Values("Authorization"); len(hs) {
	case 0:
	case 1:
		if scheme, tok, ok := strings.Cut(hs[0], " "); ok && strings.EqualFold(scheme, "Bearer") {
			return strings.TrimSpace(tok)
		}
		return ""
	default:
		return ""
	}
	if !socketRequest(r) {
		return ""
	}
	return r.URL.Query().Get("token")
}

// socketRequest tells a WebSocket upgrade or an EventSource request.
func socketRequest(r *http.Request) bool {
	for _, v := range r.Header.Values("Upgrade") {
		if strings.EqualFold(strings.TrimSpace(v), "websocket") {
			return true
		}
	}
	return strings.Contains(r.Header.Get("Accept"), "text/event-stream")
}

// Middleware requires a valid user token and puts its claims in the request
// context.
func (v *Verifier) Middleware() echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			tok := TokenFromRequest(c.Request())
			if tok == "" {
				return wire.Errorf(http.StatusUnauthorized, "unauthorized", "a bearer token is required")
			}
			claims, err := v.Verify(tok)
			if err != nil {
				return wire.Errorf(http.StatusUnauthorized, "unauthorized", "the token is not valid")
			}
			c.SetRequest(c.Request().WithContext(WithClaims(c.Request().Context(), claims)))
			return next(c)
		}
	}
}

// WithClaims returns ctx carrying claims.
func WithClaims(ctx context.Context, c *Claims) context.Context {
	return context.WithValue(ctx, claimsKey{}, c)
}

// FromContext returns the verified claims of the request, or nil.
func FromContext(ctx context.Context) *Claims {
	c, _ := ctx.Value(claimsKey{}).(*Claims)
	return c
}

// UserID is the verified user of the request, or "".
func UserID(c echo.Context) string {
	if cl := FromContext(c.Request().Context()); cl != nil {
		return cl.Subject
	}
	return ""
}

// APIKeyHeader carries the server-to-server key.
const APIKeyHeader = "X-API-Key"

// RequireAPIKey guards server-to-server endpoints. With no key configured
// every call is refused.
func RequireAPIKey(key string) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			if key == "" {
				return wire.Errorf(http.StatusUnauthorized, "unauthorized", "no API key is configured on this server")
			}
			// Exactly one header: with two, a proxy may have checked the
			// other one.
			got := c.Request().Header.Values(APIKeyHeader)
			if len(got) != 1 || subtle.ConstantTimeCompare([]byte(got[0]), []byte(key)) != 1 {
				return wire.Errorf(http.StatusUnauthorized, "unauthorized", "a valid X-API-Key header is required")
			}
			return next(c)
		}
	}
}

// SignDev mints an HS256 user token for development.
func SignDev(secret, user string, ttl time.Duration, rooms []string, issuer, audience string) (string, error) {
	if secret == "" {
		return "", errors.New("no JWT secret: set auth.jwt_secret (PRESENCED_JWT_SECRET) or let development mode generate one")
	}
	if err := ValidUserID(user); err != nil {
		return "", err
	}
	now := time.Now()
	claims := Claims{
		RegisteredClaims: jwt.RegisteredClaims{
			Subject:   user,
			IssuedAt:  jwt.NewNumericDate(now),
			ExpiresAt: jwt.NewNumericDate(now.Add(ttl)),
			Issuer:    issuer,
		},
		Rooms: rooms,
	}
	if audience != "" {
		claims.Audience = jwt.ClaimStrings{audience}
	}
	return jwt.NewWithClaims(jwt.SigningMethodHS256, claims).SignedString([]byte(secret))
}
