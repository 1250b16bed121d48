package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/spf13/cobra"
	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/internal/auth"
)

const opsSecret = "ops-test-secret-0123456789abcdef0123"

// run executes one command with args and the environment env, returning
// its stdout and error.
func run(t *testing.T, cmd *cobra.Command, env map[string]string, args ...string) (string, error) {
	t.Helper()
	for k, v := range env {
		t.Setenv(k, v)
	}
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&bytes.Buffer{})
	cmd.SetArgs(args)
	err := cmd.Execute()
	return out.String(), err
}

func TestTokenCheckSaysWhatTheServerWouldSay(t *testing.T) {
	env := map[string]string{"PRESENCED_JWT_SECRET": opsSecret}
	good, err := auth.SignDev(opsSecret, "alice", time.Hour, []string{"team-a"}, "", "")
	require.NoError(t, err)
	out, err := run(t, Token(), env, "check", good, "--data-dir", t.TempDir())
	require.NoError(t, err)
	require.Contains(t, out, `accepted: user "alice" in rooms team-a`)

	expired, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{
		"sub": "bob", "exp": time.Now().Add(-time.Hour).Unix(),
	}).SignedString([]byte(opsSecret))
	require.NoError(t, err)
	out, err = run(t, Token(), env, "check", expired, "--data-dir", t.TempDir())
	require.Error(t, err)
	require.Contains(t, out, "refused: expired at")

	other, err := auth.SignDev("another-secret-0123456789abcdef0123", "alice", time.Hour, nil, "", "")
	require.NoError(t, err)
	out, err = run(t, Token(), env, "check", other, "--data-dir", t.TempDir())
	require.Error(t, err)
	require.Contains(t, out, "the signature does not verify")

	out, err = run(t, Token(), map[string]string{"PRESENCED_AUTH_ISSUER": "https://idp"}, "check", good, "--data-dir", t.TempDir())
	require.Error(t, err)
	require.Contains(t, out, "a required claim is missing")
}

func TestConfigPrintShowsSourcesAndHidesSecrets(t *testing.T) {
	env := map[string]string{"PRESENCED_API_KEY": "the-api-key-0123456789", "PRESENCED_REDIS_URL": "redis://:pw123@cache:6379/0"}
	out, err := run(t, ConfigCmd(), env, "print", "--roles", "booking")
	require.NoError(t, err)
	require.NotContains(t, out, "the-api-key")
	require.NotContains(t, out, "pw123")
	lines := map[string]string{}
	for _, l := range strings.Split(out, "\n") {
		if f := strings.Fields(l); len(f) >= 3 {
			lines[f[0]] = strings.Join(f[1:], " ")
		}
	}
	require.Equal(t, "<redacted> env PRESENCED_API_KEY", lines["auth.api_key"])
	require.Equal(t, `"redis://:xxxxx@cache:6379/0" env PRESENCED_REDIS_URL`, lines["redis.url"])
	require.Equal(t, `["booking"] flag`, lines["roles"])
	require.Equal(t, `"info" default`, lines["log.level"])
}

func TestConfigCheck(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.yaml")
	require.NoError(t, os.WriteFile(good, []byte("roles: [booking, worker]\nlog:\n  level: warn\n"), 0o600))
	out, err := run(t, ConfigCmd(), nil, "check", good)
	require.NoError(t, err)
	require.Equal(t, good+": ok\n", out)

	for body, want := range map[string]string{
		"roles: [nope]\n":                "unknown role",
		"log:\n  levle: warn\n":          "log.levle (line 2): unknown key",
		"http:\n  shutdown_timeout: 5\n": "not a duration",
	} {
		bad := filepath.Join(dir, "bad.yaml")
		require.NoError(t, os.WriteFile(bad, []byte(body), 0o600))
		_, err := run(t, ConfigCmd(), nil, "check", bad)
		require.ErrorContains(t, err, want)
	}
}

// A file with several problems gets them all in one run, each on its own
// line, so fixing a file is not one run per mistake.
func TestConfigCheckListsEveryProblem(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	body := "roles: [nope]\nlog:\n  levle: warn\n  format: xml\nhttp:\n  shutdown_timeout: 5\n  body_limit_bytes: -1\nsurprise: 1\n"
	require.NoError(t, os.WriteFile(bad, []byte(body), 0o600))
	out, err := run(t, ConfigCmd(), nil, "check", bad)
	require.Error(t, err)
	require.ErrorContains(t, err, bad+": 6 problems")
	for _, want := range []string{
		"log.levle (line 3): unknown key",
		"http.shutdown_timeout (line 6): ",
		"surprise (line 8): unknown key",
		`log.format: "xml" is not one of text, json`,
		"http.body_limit_bytes: must be positive",
		`unknown role "nope"`,
	} {
		require.Contains(t, out, want)
	}
	require.Len(t, strings.Split(strings.TrimSpace(out), "\n"), 6, "one line per problem:\n%s", out)
}
