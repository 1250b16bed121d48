package config

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func writeFile(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "c.yaml")
	require.NoError(t, os.WriteFile(p, []byte(body), 0o600))
	return p
}

// The documented file must say exactly what the code defaults to, and name
// every key: otherwise the documentation drifts.
func TestDocumentedConfigIsTheDefault(t *testing.T) {
	t.Parallel()
	cfg, err := Load(Source{File: "../config.yaml"})
	require.NoError(t, err)
	require.Equal(t, Default(), cfg)

	raw, err := os.ReadFile("../config.yaml")
	require.NoError(t, err)
	for _, key := range Keys() {
		leaf := key[strings.LastIndex(key, ".")+1:]
		require.Containsf(t, string(raw), leaf+":", "config.yaml does not document %s", key)
	}
}

func TestPrecedence(t *testing.T) {
	t.Parallel()
	file := writeFile(t, "listen: 127.0.0.1:1111\nlog:\n  level: warn\nhttp:\n  shutdown_timeout: 3s\n")

	cfg, err := Load(Source{})
	require.NoError(t, err)
	require.Equal(t, "127.0.0.1:8080", cfg.Listen, "default")

	cfg, err = Load(Source{File: file})
	require.NoError(t, err)
	require.Equal(t, "127.0.0.1:1111", cfg.Listen, "file beats default")
	require.Equal(t, 3*time.Second, cfg.HTTP.ShutdownTimeout)

	env := []string{"PRESENCED_LISTEN=127.0.0.1:2222", "PRESENCED_LOG_LEVEL=debug", "PRESENCED_ROLES=count, ingest"}
	cfg, err = Load(Source{File: file, Environ: env})
	require.NoError(t, err)
	require.Equal(t, "127.0.0.1:2222", cfg.Listen, "env beats file")
	require.Equal(t, "debug", cfg.Log.Level)
	require.Equal(t, []string{"count", "ingest"}, cfg.Roles)
	require.Equal(t, 3*time.Second, cfg.HTTP.ShutdownTimeout, "file value kept when env is silent")

	cfg, err = Load(Source{File: file, Environ: env, Flags: map[string]string{"listen": "127.0.0.1:3333"}})
	require.NoError(t, err)
	require.Equal(t, "127.0.0.1:3333", cfg.Listen, "flag beats env")
	require.Equal(t, "debug", cfg.Log.Level)
}

func TestEnvAliases(t *testing.T) {
	t.Parallel()
	cfg, err := Load(Source{Environ: []string{
		"PRESENCED_AUTH_JWT_SECRET=long-name",
		"PRESENCED_JWT_SECRET=short-name",
		"PRESENCED_API_KEY=k1",
	}})
	require.NoError(t, err)
	require.Equal(t, "short-name", cfg.Auth.JWTSecret)
	require.Equal(t, "k1", cfg.Auth.APIKey)
}

func TestBadConfigNamesTheKey(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		src  Source
		want []string
	}{
		{"bad duration in file", Source{File: writeFile(t, "http:\n  shutdown_timeout: soon\n")},
			[]string{"http.shutdown_timeout", "not a duration"}},
		{"unknown key", Source{File: writeFile(t, "redis:\n  urll: x\n")},
			[]string{"redis.urll", "unknown key"}},
		{"unknown section", Source{File: writeFile(t, "rediss:\n  url: x\n")},
			[]string{"rediss", "unknown key"}},
		{"unreadable file", Source{File: filepath.Join(t.TempDir(), "missing.yaml")},
			[]string{"config file", "no such file"}},
		{"not yaml", Source{File: writeFile(t, "listen: [\n")},
			[]string{"config file"}},
		{"bad env", Source{Environ: []string{"PRESENCED_REALTIME_SEND_QUEUE=many"}},
			[]string{"PRESENCED_REALTIME_SEND_QUEUE", "realtime.send_queue", "not an integer"}},
		{"bad bool", Source{Environ: []string{"PRESENCED_REDIS_CLUSTER=maybe"}},
			[]string{"redis.cluster"}},
		{"invalid value", Source{Flags: map[string]string{"log.level": "loud"}},
			[]string{"log.level", "loud"}},
		{"mapping where value expected", Source{File: writeFile(t, "listen:\n  a: b\n")},
			[]string{"listen", "single value"}},
		{"brace in prefix", Source{Environ: []string{"PRESENCED_REDIS_PREFIX=a{b"}},
			[]string{"redis.prefix"}},
		{"invisible as a manual status", Source{File: writeFile(t, "presence:\n  manual_statuses: [busy, invisible]\n")},
			[]string{"presence.manual_statuses", "privacy mode"}},
		{"no audit retention", Source{File: writeFile(t, "presence:\n  audit_retention: 0s\n")},
			[]string{"presence.audit_retention"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Load(tc.src)
			require.Error(t, err)
			for _, w := range tc.want {
				require.Contains(t, err.Error(), w)
			}
		})
	}
}

func TestEmptyFileAndSectionsSetNothing(t *testing.T) {
	t.Parallel()
	cfg, err := Load(Source{File: writeFile(t, "")})
	require.NoError(t, err)
	require.Equal(t, Default(), cfg)
	cfg, err = Load(Source{File: writeFile(t, "auth:\n")})
	require.NoError(t, err)
	require.Equal(t, Default(), cfg)
}

func TestUnknownEnvIsReported(t *testing.T) {
	t.Parallel()
	got := UnknownEnv([]string{"PRESENCED_LISTEN=x", "PRESENCED_LISTN=y", "PRESENCED_TEST_REDIS_URL=z", "HOME=/"}, "PRESENCED_TEST_")
	require.Equal(t, []string{"PRESENCED_LISTN"}, got)
}

func TestEveryKeyHasAnEnvName(t *testing.T) {
	t.Parallel()
	cfg := Default()
	for key, f := range fieldIndex(&cfg) {
		require.Equal(t, EnvName(key), f.env[0])
		require.True(t, f.value.CanSet(), key)
		require.NotEqual(t, reflect.Invalid, f.value.Kind())
	}
}
