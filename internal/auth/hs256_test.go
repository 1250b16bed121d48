package auth

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/config"
)

// The HS256 path answers as the JWT library does, token by token: the same
// tokens accepted with the same claims, the same refused for the same
// reasons (the library's error kinds, which the token check command
// explains). The tokens vary
// every claim the checks read, the header, the signature and the encoding.
func TestHS256PathAnswersAsTheLibrary(t *testing.T) {
	t.Parallel()
	now := time.Now()
	rng := rand.New(rand.NewPCG(17, 3))
	pick := func(vs ...any) any { return vs[rng.IntN(len(vs))] }
	times := []any{nil, now.Add(time.Hour).Unix(), now.Add(-time.Hour).Unix(), now.Add(-10 * time.Second).Unix(),
		now.Add(20 * time.Second).Unix(), now.Add(time.Minute).Unix(), float64(now.Add(time.Hour).Unix()) + 0.75,
		fmt.Sprint(now.Add(time.Hour).Unix()), fmt.Sprint(now.Add(-time.Hour).Unix()), "soon", true, -1, []int{1}}
	cases := []struct {
		name string
		cfg  config.Auth
	}{
		{"secret", config.Auth{JWTSecret: secret}},
		{"issuer and audience", config.Auth{JWTSecret: secret, Issuer: "idp", Audience: "presenced"}},
	}
	seen := map[string]int{}
	for _, tc := range cases {
		v, err := NewVerifier(context.Background(), tc.cfg)
		require.NoError(t, err)
		for i := range 3000 {
			claims := jwt.MapClaims{}
			set := func(name string, val any) {
				if val != nil {
					claims[name] = val
				}
			}
			set("sub", pick(nil, "alice", "bob-2", 7, ""))
			set("exp", pick(times...))
			set("nbf", pick(times...))
			set("iat", pick(times...))
			set("iss", pick(nil, "idp", "other", "", 3))
			set("aud", pick(nil, "presenced", "other", []string{"x", "presenced"}, []string{}, []any{"presenced", 1}, ""))
			set("rooms", pick(nil, []string{"r1", "r2"}, []any{"r1", 2}, "r1"))
			set("jti", pick(nil, "id-1"))
			method, key := jwt.SigningMethod(jwt.SigningMethodHS256), any([]byte(secret))
			switch rng.IntN(10) {
			case 0:
				key = []byte("another-secret-another-secret-xx")
			case 1:
				method = jwt.SigningMethodHS512
			}
			tok := jwt.NewWithClaims(method, claims)
			if rng.IntN(8) == 0 {
				tok.Header["kid"] = "k1"
			}
			signed, err := tok.SignedString(key)
			require.NoError(t, err)
			switch rng.IntN(20) {
			case 0:
				signed += "."
			case 1:
				signed = signed[:len(signed)-2]
			case 2:
				signed = base64.RawURLEncoding.EncodeToString([]byte(`{"ALG":"HS256"}`)) + signed[indexDot(signed):]
			}
			fast, handled, fastErr := v.verifyHS256(signed)
			if !handled {
				seen["library"]++
				continue
			}
			lib, libErr := v.verifyLibrary(signed)
			require.Equal(t, libErr == nil, fastErr == nil, "%s #%d %v: library %v, HS256 path %v", tc.name, i, claims, libErr, fastErr)
			for _, kind := range []error{jwt.ErrTokenMalformed, jwt.ErrTokenSignatureInvalid, jwt.ErrTokenUnverifiable,
				jwt.ErrTokenInvalidClaims, jwt.ErrTokenRequiredClaimMissing, jwt.ErrTokenExpired, jwt.ErrTokenNotValidYet,
				jwt.ErrTokenInvalidIssuer, jwt.ErrTokenInvalidAudience} {
				require.Equal(t, errors.Is(libErr, kind), errors.Is(fastErr, kind),
					"%s #%d %v: %v: library %v, HS256 path %v", tc.name, i, claims, kind, libErr, fastErr)
			}
			if libErr == nil {
				seen["accepted"]++
				require.Equal(t, lib, fast, "%s #%d", tc.name, i)
			} else {
				seen["refused"]++
			}
		}
	}
	require.Greater(t, seen["accepted"], 25, "%v", seen)
	require.Greater(t, seen["refused"], 1000, "%v", seen)
	require.Greater(t, seen["library"], 100, "%v", seen)
}

func indexDot(s string) int {
	for i := range s {
		if s[i] == '.' {
			return i
		}
	}
	return 0
}

// BenchmarkVerify is one connect's token check.
func BenchmarkVerify(b *testing.B) {
	v, err := NewVerifier(context.Background(), config.Auth{JWTSecret: secret})
	require.NoError(b, err)
	tok, err := SignDev(secret, "alice", time.Hour, []string{"room1"}, "", "")
	require.NoError(b, err)
	b.Run("hs256-path", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := v.Verify(tok); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("library", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := v.verifyLibrary(tok); err != nil {
				b.Fatal(err)
			}
		}
	})
}
