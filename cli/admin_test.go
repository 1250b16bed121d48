package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/internal/testenv"
)

// The administration commands print what they created, refuse an id taken,
// and reach the stores only through the module they call.
func TestEventAndHotelCreate(t *testing.T) {
	t.Parallel()
	pg, data := testenv.OwnPostgresURL(t), t.TempDir()
	out, err := run(t, EventCmd(), nil, "create", "--id", "cli-final", "--name", "Cup Final",
		"--sections", "A:2x3@4500,B:1x4@3000", "--starts-at", "2031-06-01T20:00:00Z",
		"--postgres-url", pg, "--data-dir", data)
	require.NoError(t, err)
	var ev map[string]any
	require.NoError(t, json.Unmarshal([]byte(out), &ev), out)
	require.Equal(t, "cli-final", ev["id"])
	require.EqualValues(t, 10, ev["seats"])
	require.EqualValues(t, 2, ev["sections"])
	_, err = run(t, EventCmd(), nil, "create", "--id", "cli-final", "--sections", "A:1x1@100",
		"--starts-at", "2031-06-01T20:00:00Z", "--postgres-url", pg, "--data-dir", data)
	require.ErrorContains(t, err, "event already exists")

	out, err = run(t, HotelCmd(), nil, "create", "--id", "cli-grand", "--city", "lisbon",
		"--timezone", "Europe/Lisbon", "--room-types", "std:3x2@9000", "--open-nights", "7",
		"--postgres-url", pg, "--data-dir", data)
	require.NoError(t, err)
	var h map[string]any
	require.NoError(t, json.Unmarshal([]byte(out), &h), out)
	require.Equal(t, "cli-grand", h["id"])
	require.EqualValues(t, 1, h["roomTypes"])
}

// A command starts only the parts it calls: creating an event outside
// development mode needs no payment keys, `presenced check` does.
func TestCommandsNeedOnlyTheSecretsOfTheirParts(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	file := filepath.Join(dir, "prod.yaml")
	require.NoError(t, os.WriteFile(file, []byte("auth:\n  dev_secrets: false\n  api_key: cli-test-api-key-0123456789\n"+
		"  jwt_secret: cli-test-jwt-secret-0123456789abcdef\n"), 0o600))
	common := []string{"--config", file, "--postgres-url", testenv.OwnPostgresURL(t), "--data-dir", dir}
	_, err := run(t, EventCmd(), nil, append([]string{"create", "--id", "cli-prod", "--sections", "A:1x2@100",
		"--starts-at", "2031-06-01T20:00:00Z"}, common...)...)
	require.NoError(t, err)
	_, err = run(t, CheckCmd(), nil, common...)
	require.ErrorContains(t, err, "payments.primary")
}
