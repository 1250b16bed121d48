package cluster

import (
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/app"
)

// The split runs every role of the role table, and only those.
func TestPlanesRunEveryRole(t *testing.T) {
	t.Parallel()
	var covered []string
	for _, p := range Planes {
		for _, r := range p.Roles {
			require.Contains(t, app.RoleNames(), r, "plane %s", p.Name)
			covered = append(covered, r)
		}
	}
	for _, r := range app.Roles() {
		require.True(t, slices.Contains(covered, r.Name), "role %s runs in the split", r.Name)
	}
}
