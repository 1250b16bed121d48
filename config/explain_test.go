package config

import (
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestExplainSaysWhereEachValueCameFromAndHidesSecrets(t *testing.T) {
	file := filepath.Join(t.TempDir(), "p.yaml")
	require.NoError(t, os.WriteFile(file, []byte("redis:\n  url: redis://:hunter2@cache:6379/0\nauth:\n  api_key: file-key-0123456789\nhttp:\n  pprof: true\n"), 0o600))
	settings, cfg, err := Explain(Source{
		File:    file,
		Environ: []string{"PRESENCED_JWT_SECRET=env-secret-0123456789abcdef", "PRESENCED_LOG_LEVEL=debug"},
		Flags:   map[string]string{"listen": "127.0.0.1:9999"},
	})
	require.NoError(t, err)
	require.Equal(t, "debug", cfg.Log.Level)
	by := map[string]Setting{}
	for _, s := range settings {
		by[s.Key] = s
	}
	require.Len(t, by, len(Keys()), "every key is shown")
	require.Equal(t, Setting{Key: "listen", Value: `"127.0.0.1:9999"`, Source: "flag"}, by["listen"])
	require.Equal(t, Setting{Key: "log.level", Value: `"debug"`, Source: "env PRESENCED_LOG_LEVEL"}, by["log.level"])
	require.Equal(t, Setting{Key: "http.pprof", Value: "true", Source: "file " + file}, by["http.pprof"])
	require.Equal(t, Setting{Key: "http.shutdown_timeout", Value: "15s", Source: "default"}, by["http.shutdown_timeout"])
	require.Equal(t, Setting{Key: "auth.jwt_secret", Value: "<redacted>", Source: "env PRESENCED_JWT_SECRET", Secret: true}, by["auth.jwt_secret"])
	require.Equal(t, "<redacted>", by["auth.api_key"].Value)
	require.Equal(t, `""`, by["presence.webhook.secret"].Value, "an empty secret says so")
	require.Equal(t, `"redis://:xxxxx@cache:6379/0"`, by["redis.url"].Value)
	for _, s := range settings {
		require.NotContains(t, s.Value, "hunter2")
		require.NotContains(t, s.Value, "env-secret")
		require.NotContains(t, s.Value, "file-key")
	}
}

// Every key whose name says credential is either a secret or listed here
// as public (paths, public keys, switches): a new secret cannot be printed
// by forgetting it.
func TestEveryCredentialLikeKeyIsClassified(t *testing.T) {
	public := map[string]bool{
		"http.tls_key":               true, // a file path
		"auth.dev_secrets":           true, // a switch
		"viewers.cookie_verify_keys": true, // public keys
		"waitingroom.verify_keys":    true, // public keys
	}
	looksSecret := regexp.MustCompile(`secret|password|_key|api_key|token`)
	for _, k := range Keys() {
		if looksSecret.MatchString(k) && !public[k] {
			require.Truef(t, IsSecret(k), "%s looks like a credential: add it to secretKeys or to this test's public list", k)
		}
	}
	for k := range secretKeys {
		require.Contains(t, Keys(), k)
	}
}
