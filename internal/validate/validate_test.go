package validate

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestText(t *testing.T) {
	t.Parallel()
	for _, ok := range []string{"", "Arena", "Zürich Hallenstadion", "🎫 night", "\uFFFD is text"} {
		require.NoError(t, Text("name", ok, 64), ok)
	}
	for _, bad := range []string{"nul\x00", "\xff", "line\nbreak", "tab\t", "esc\x1b[31m", "c1\u0085", "del\x7f", strings.Repeat("x", 65)} {
		require.Error(t, Text("name", bad, 64), "%q", bad)
	}
	require.Error(t, Token("key", "", 8))
	require.Error(t, Token("key", "a b", 8))
	require.NoError(t, Token("key", "a-b", 8))
}

func TestKindsAndUUID(t *testing.T) {
	t.Parallel()
	require.True(t, EventID.Valid("sale-2030.v1"))
	require.False(t, EventID.Valid("{tag}"))
	require.False(t, EventID.Valid(".dot"))
	require.ErrorContains(t, SectionID.Check("A:1"), "section id")
	u, err := UUID("id", "0190C1A2-7B3C-7D4E-8F90-A1B2C3D4E5F6")
	require.NoError(t, err)
	require.Equal(t, "0190c1a2-7b3c-7d4e-8f90-a1b2c3d4e5f6", u)
	for _, bad := range []string{"urn:uuid:0190c1a2-7b3c-7d4e-8f90-a1b2c3d4e5f6", "{0190c1a2-7b3c-7d4e-8f90-a1b2c3d4e5f6}",
		"0190c1a27b3c7d4e8f90a1b2c3d4e5f6", "0190c1a2-7b3c-7d4e-8f90-a1b2c3d4e5fg"} {
		_, err := UUID("id", bad)
		require.Error(t, err, bad)
	}
}
