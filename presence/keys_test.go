package presence

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/store"
)

// The single-key builder names the same keys as the full set, so loops
// that use it touch the keys the scripts use.
func TestUserKeyNamesTheSameKeys(t *testing.T) {
	k := keys{ks: store.NewKeyspace("p:"), shards: 4}
	for _, id := range []string{"alice", "a:b", "x"} {
		uk := k.user(id)
		require.Equal(t, uk.status, k.userKey(id, partStatus))
		require.Equal(t, uk.followers, k.userKey(id, partFollowers))
		require.Equal(t, uk.rooms, k.userKey(id, partRooms))
		require.Equal(t, uk.channel, k.userKey(id, partChannel))
	}
}
