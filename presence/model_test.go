package presence

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
)

// cleanIDs keeps the first of each id in order, whether the list is short
// (repeats found by scanning) or long (by a map), and names a bad id.
func TestCleanIDsKeepsTheFirstOfEachInOrder(t *testing.T) {
	t.Parallel()
	out, _, ok := cleanIDs([]string{"b", "a", "b", "c", "a"})
	require.True(t, ok)
	require.Equal(t, []string{"b", "a", "c"}, out)

	var long, want []string
	for i := range 3 * smallSet {
		long = append(long, fmt.Sprintf("u%d", i%(2*smallSet)))
	}
	for i := range 2 * smallSet {
		want = append(want, fmt.Sprintf("u%d", i))
	}
	out, _, ok = cleanIDs(long)
	require.True(t, ok)
	require.Equal(t, want, out)

	_, bad, ok := cleanIDs([]string{"a", "", "b"})
	require.False(t, ok)
	require.Equal(t, "", bad)
	_, bad, ok = cleanIDs(append(long, "bad id"))
	require.False(t, ok)
	require.Equal(t, "bad id", bad)
}
