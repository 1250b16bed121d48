package auth

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"log/slog"
	"math/big"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/labstack/echo/v4"
	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/config"
	"github.com/presenced/presenced/web/wire"
)

const secret = "0123456789abcdef0123456789abcdef-test"

func claimsFor(user string, exp time.Time) Claims {
	return Claims{RegisteredClaims: jwt.RegisteredClaims{Subject: user, ExpiresAt: jwt.NewNumericDate(exp)}}
}

// jwksServer publishes one RSA key under kid "k1".
func jwksServer(t *testing.T, key *rsa.PublicKey) string {
	t.Helper()
	b64 := base64.RawURLEncoding.EncodeToString
	body, _ := json.Marshal(map[string]any{"keys": []map[string]string{{
		"kty": "RSA", "kid": "k1", "alg": "RS256", "use": "sig",
		"n": b64(key.N.Bytes()), "e": b64(big.NewInt(int64(key.E)).Bytes()),
	}}})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(body)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

func TestHS256Tokens(t *testing.T) {
	t.Parallel()
	v, err := NewVerifier(context.Background(), config.Auth{JWTSecret: secret})
	require.NoError(t, err)

	tok, err := SignDev(secret, "alice", time.Hour, []string{"room1"}, "", "")
	require.NoError(t, err)
	c, err := v.Verify(tok)
	require.NoError(t, err, "valid")
	require.Equal(t, "alice", c.Subject)
	require.Equal(t, []string{"room1"}, c.Rooms)

	expired, _ := jwt.NewWithClaims(jwt.SigningMethodHS256, claimsFor("alice", time.Now().Add(-time.Hour))).SignedString([]byte(secret))
	_, err = v.Verify(expired)
	require.ErrorIs(t, err, ErrInvalidToken, "expired")

	noExp, _ := jwt.NewWithClaims(jwt.SigningMethodHS256, Claims{RegisteredClaims: jwt.RegisteredClaims{Subject: "a"}}).SignedString([]byte(secret))
	_, err = v.Verify(noExp)
	require.ErrorIs(t, err, ErrInvalidToken, "no expiry")

	forged, _ := jwt.NewWithClaims(jwt.SigningMethodHS256, claimsFor("alice", time.Now().Add(time.Hour))).SignedString([]byte("another-secret-another-secret-xx"))
	_, err = v.Verify(forged)
	require.ErrorIs(t, err, ErrInvalidToken, "wrong signature")

	none, _ := jwt.NewWithClaims(jwt.SigningMethodNone, claimsFor("alice", time.Now().Add(time.Hour))).SignedString(jwt.UnsafeAllowNoneSignatureType)
	_, err = v.Verify(none)
	require.ErrorIs(t, err, ErrInvalidToken, "alg none")

	hs512, _ := jwt.NewWithClaims(jwt.SigningMethodHS512, claimsFor("alice", time.Now().Add(time.Hour))).SignedString([]byte(secret))
	_, err = v.Verify(hs512)
	require.ErrorIs(t, err, ErrInvalidToken, "an algorithm not configured")

	noSub, _ := jwt.NewWithClaims(jwt.SigningMethodHS256, claimsFor("", time.Now().Add(time.Hour))).SignedString([]byte(secret))
	_, err = v.Verify(noSub)
	require.ErrorIs(t, err, ErrInvalidToken, "no subject")

	_, err = v.Verify("not.a.token")
	require.ErrorIs(t, err, ErrInvalidToken)
}

func TestJWKSTokensAndAlgorithmConfusion(t *testing.T) {
	t.Parallel()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	require.NoError(t, err)
	url := jwksServer(t, &key.PublicKey)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)

	// Both a secret and a JWKS: the confusion attack's best chance.
	v, err := NewVerifier(ctx, config.Auth{JWTSecret: secret, JWKSURL: url, JWKSRefresh: time.Minute, Issuer: "https://idp", Audience: "presenced"})
	require.NoError(t, err)

	sign := func(m jwt.SigningMethod, k any, kid string, c Claims) string {
		tok := jwt.NewWithClaims(m, c)
		if kid != "" {
			tok.Header["kid"] = kid
		}
		s, err := tok.SignedString(k)
		require.NoError(t, err)
		return s
	}
	good := claimsFor("bob", time.Now().Add(time.Hour))
	good.Issuer, good.Audience = "https://idp", jwt.ClaimStrings{"presenced"}

	c, err := v.Verify(sign(jwt.SigningMethodRS256, key, "k1", good))
	require.NoError(t, err, "RS256 from the JWKS")
	require.Equal(t, "bob", c.Subject)

	wrongIss := good
	wrongIss.Issuer = "https://evil"
	_, err = v.Verify(sign(jwt.SigningMethodRS256, key, "k1", wrongIss))
	require.ErrorIs(t, err, ErrInvalidToken, "issuer")

	other, _ := rsa.GenerateKey(rand.Reader, 2048)
	_, err = v.Verify(sign(jwt.SigningMethodRS256, other, "k1", good))
	require.ErrorIs(t, err, ErrInvalidToken, "signed by another key")

	// HS/RS confusion: HMAC keyed with the public key the server publishes.
	pubPEM := pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: must(x509.MarshalPKIXPublicKey(&key.PublicKey))})
	_, err = v.Verify(sign(jwt.SigningMethodHS256, pubPEM, "k1", good))
	require.ErrorIs(t, err, ErrInvalidToken, "HS256 keyed with the RSA public key")
	_, err = v.Verify(sign(jwt.SigningMethodHS256, key.PublicKey.N.Bytes(), "k1", good))
	require.ErrorIs(t, err, ErrInvalidToken, "HS256 keyed with the modulus")

	ec, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	_, err = v.Verify(sign(jwt.SigningMethodES256, ec, "k1", good))
	require.ErrorIs(t, err, ErrInvalidToken, "ES256 claiming the RSA kid")

	// A JWKS-only server refuses HS256 whatever it is keyed with.
	v2, err := NewVerifier(ctx, config.Auth{JWKSURL: url, JWKSRefresh: time.Minute})
	require.NoError(t, err)
	_, err = v2.Verify(sign(jwt.SigningMethodHS256, []byte(secret), "", claimsFor("x", time.Now().Add(time.Hour))))
	require.ErrorIs(t, err, ErrInvalidToken)
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

func TestVerifierNeedsAKey(t *testing.T) {
	t.Parallel()
	_, err := NewVerifier(context.Background(), config.Auth{})
	require.ErrorContains(t, err, "jwt_secret")
	_, err = NewVerifier(context.Background(), config.Auth{JWTSecret: "short"})
	require.ErrorContains(t, err, "32 characters")
}

func TestMiddlewareAndAPIKey(t *testing.T) {
	t.Parallel()
	v, err := NewVerifier(context.Background(), config.Auth{JWTSecret: secret})
	require.NoError(t, err)
	e := echo.New()
	e.HTTPErrorHandler = wire.ErrorHandler(slog.New(slog.DiscardHandler))
	e.GET("/me", func(c echo.Context) error { return c.String(200, UserID(c)) }, v.Middleware())
	e.GET("/admin", func(c echo.Context) error { return c.String(200, "ok") }, RequireAPIKey("k"))
	e.GET("/nokey", func(c echo.Context) error { return c.String(200, "ok") }, RequireAPIKey(""))
	tok, _ := SignDev(secret, "carol", time.Minute, nil, "", "")

	do := func(path string, hdr map[string]string) (int, string) {
		req := httptest.NewRequest(http.MethodGet, path, nil)
		for k, val := range hdr {
			req.Header.Set(k, val)
		}
		rec := httptest.NewRecorder()
		e.ServeHTTP(rec, req)
		return rec.Code, rec.Body.String()
	}
	code, body := do("/me", map[string]string{"Authorization": "Bearer " + tok})
	require.Equal(t, 200, code)
	require.Equal(t, "carol", body)
	code, body = do("/me?token="+tok, map[string]string{"Upgrade": "websocket", "Connection": "Upgrade"})
	require.Equal(t, 200, code, "query token for sockets")
	require.Equal(t, "carol", body)
	code, body = do("/me?token="+tok, map[string]string{"Accept": "text/event-stream"})
	require.Equal(t, 200, code, "and for EventSource streams")
	require.Equal(t, "carol", body)
	code, _ = do("/me", nil)
	require.Equal(t, 401, code)
	code, _ = do("/me", map[string]string{"Authorization": "Basic xyz"})
	require.Equal(t, 401, code)

	code, _ = do("/admin", map[string]string{APIKeyHeader: "k"})
	require.Equal(t, 200, code)
	code, _ = do("/admin", map[string]string{APIKeyHeader: "wrong"})
	require.Equal(t, 401, code)
	code, _ = do("/nokey", map[string]string{APIKeyHeader: ""})
	require.Equal(t, 401, code)
}

func TestDevSecretsAreCreatedOnceAndShared(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	var wg sync.WaitGroup
	got := make([]DevSecrets, 8)
	for i := range got {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			s, err := LoadOrCreateDevSecrets(dir)
			require.NoError(t, err)
			got[i] = s
		}(i)
	}
	wg.Wait()
	for _, s := range got {
		require.Equal(t, got[0], s)
	}
	st, err := os.Stat(filepath.Join(dir, DevSecretsFile))
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), st.Mode().Perm())
	again, err := LoadOrCreateDevSecrets(dir)
	require.NoError(t, err)
	require.Equal(t, got[0], again)
}

// One rule for user ids: the verifier refuses a token whose subject breaks
// it, and SignDev (presenced token) refuses to mint one.
func TestUserIDRule(t *testing.T) {
	t.Parallel()
	for _, ok := range []string{"alice", "user@example.com", "0b8f6c1e-7d1a-4c55-9a3e-2f1d3c4b5a69", "zoë"} {
		require.NoError(t, ValidUserID(ok), ok)
	}
	for _, bad := range []string{"", "a{b}", "alice smith", "tab\there", "nul\x00", "\xff", strings.Repeat("x", MaxUserIDBytes+1)} {
		require.Error(t, ValidUserID(bad), "%q", bad)
		_, err := SignDev(secret, bad, time.Hour, nil, "", "")
		require.Error(t, err, "%q", bad)
	}
	v, err := NewVerifier(context.Background(), config.Auth{JWTSecret: secret})
	require.NoError(t, err)
	braces, _ := jwt.NewWithClaims(jwt.SigningMethodHS256, claimsFor("a{b}", time.Now().Add(time.Hour))).SignedString([]byte(secret))
	_, err = v.Verify(braces)
	require.ErrorIs(t, err, ErrInvalidToken, "a subject the server cannot use")
}

// Tokens belong in one Authorization header; ?token= only where a browser
// cannot set one (sockets), since URLs end up in logs and proxies.
func TestTokenPlacesAndSingleHeaders(t *testing.T) {
	t.Parallel()
	v, err := NewVerifier(context.Background(), config.Auth{JWTSecret: secret})
	require.NoError(t, err)
	e := echo.New()
	e.HTTPErrorHandler = wire.ErrorHandler(slog.New(slog.DiscardHandler))
	e.GET("/me", func(c echo.Context) error { return c.String(200, UserID(c)) }, v.Middleware())
	e.GET("/admin", func(c echo.Context) error { return c.String(200, "ok") }, RequireAPIKey("k"))
	tok, _ := SignDev(secret, "carol", time.Minute, nil, "", "")
	do := func(path string, hdr http.Header) int {
		req := httptest.NewRequest(http.MethodGet, path, nil)
		for k, vs := range hdr {
			for _, v := range vs {
				req.Header.Add(k, v)
			}
		}
		rec := httptest.NewRecorder()
		e.ServeHTTP(rec, req)
		return rec.Code
	}
	require.Equal(t, 401, do("/me?token="+tok, http.Header{}), "a plain HTTP call takes no token from the URL")
	require.Equal(t, 401, do("/me", http.Header{"Authorization": {"Bearer " + tok, "Bearer " + tok}}), "two Authorization headers")
	require.Equal(t, 401, do("/admin", http.Header{APIKeyHeader: {"k", "wrong"}}), "two X-API-Key headers")
	require.Equal(t, 401, do("/admin", http.Header{APIKeyHeader: {"wrong", "k"}}), "two X-API-Key headers")
	require.Equal(t, 200, do("/admin", http.Header{APIKeyHeader: {"k"}}))
}

// exp is a NumericDate: a JSON number. The JWT library also reads "exp":
// "1999999999"; such a token is refused.
func TestTimesMustBeNumbers(t *testing.T) {
	t.Parallel()
	v, err := NewVerifier(context.Background(), config.Auth{JWTSecret: secret})
	require.NoError(t, err)
	exp := time.Now().Add(time.Hour).Unix()
	for name, claims := range map[string]jwt.MapClaims{
		"exp string": {"sub": "carol", "exp": strconv.FormatInt(exp, 10)},
		"iat string": {"sub": "carol", "exp": exp, "iat": "1"},
		"nbf string": {"sub": "carol", "exp": exp, "nbf": "1"},
		"bad room":   {"sub": "carol", "exp": exp, "rooms": []string{"r\x00"}},
	} {
		signed, err := jwt.NewWithClaims(jwt.SigningMethodHS256, claims).SignedString([]byte(secret))
		require.NoError(t, err)
		_, err = v.Verify(signed)
		require.ErrorIs(t, err, ErrInvalidToken, name)
	}
	signed, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"sub": "carol", "exp": exp, "rooms": []string{"r1"}}).SignedString([]byte(secret))
	require.NoError(t, err)
	_, err = v.Verify(signed)
	require.NoError(t, err)
}

func BenchmarkVerify(b *testing.B) {
	v, err := NewVerifier(context.Background(), config.Auth{JWTSecret: secret})
	require.NoError(b, err)
	tok, err := SignDev(secret, "alice", time.Hour, []string{"room1"}, "", "")
	require.NoError(b, err)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := v.Verify(tok); err != nil {
			b.Fatal(err)
		}
	}
}
