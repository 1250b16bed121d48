package presence_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/internal/auth"
)

// A user may hold max_sessions_per_user sessions (closed ones in grace
// count); the next connection is told why and closed with 1008.
func TestTooManySessions(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t)
	cfg.Presence.MaxSessionsPerUser = 2
	s := startServer(t, cfg)
	connect(t, s, "tabs")
	second := connect(t, s, "tabs")
	third := dialWS(t, s.base, http.Header{"Authorization": {"Bearer " + token(t, "tabs")}})
	e := third.nextError()
	require.Equal(t, "limit_exceeded", e.Code)
	require.Equal(t, 1008, third.waitClosed().Code)

	second.send("session:disconnect", nil)
	second.waitClosed()
	connect(t, s, "tabs")
}

// A token that expires while connected ends the connection at the next
// request.
func TestExpiredTokenClosesTheConnection(t *testing.T) {
	t.Parallel()
	s := startServer(t, testConfig(t))
	tok, err := auth.SignDev(testSecret, "brief", 1500*time.Millisecond, nil, "", "")
	require.NoError(t, err)
	c := dialWS(t, s.base, http.Header{"Authorization": {"Bearer " + tok}})
	c.next("presence:updated")
	time.Sleep(2500 * time.Millisecond)
	e := c.errorReply(c.send("session:ping", nil))
	require.Equal(t, "unauthorized", e.Code)
	require.Equal(t, 1008, c.waitClosed().Code)
}

// A subject id with braces would move the user's keys to another cluster
// slot: such tokens are refused. (presenced token refuses to mint one, so
// this one is signed by hand, as a foreign issuer might.)
func TestUnusableSubjectIsRefused(t *testing.T) {
	t.Parallel()
	s := startServer(t, testConfig(t))
	tok, err := jwt.NewWithClaims(jwt.SigningMethodHS256, auth.Claims{RegisteredClaims: jwt.RegisteredClaims{
		Subject: "a{b}", ExpiresAt: jwt.NewNumericDate(time.Now().Add(time.Hour)),
	}}).SignedString([]byte(testSecret))
	require.NoError(t, err)
	code, _ := httpDo(t, "GET", s.base+"/v1/presence/ws?token="+tok, "", nil)
	require.Equal(t, 401, code)
}
