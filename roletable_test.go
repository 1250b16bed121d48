package main

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/app"
)

// docs/operations.md's table of which plane gets which Secret says what
// the role table says (presenced roles --json).
func TestOperationsSecretsTableFollowsTheRoleTable(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("docs/operations.md")
	require.NoError(t, err)
	var all []string
	holders := map[string][]string{} // store or secret group → roles
	for _, r := range app.Roles() {
		all = append(all, r.Name)
		for _, g := range append(slices.Clone(r.Stores), r.Secrets...) {
			holders[g] = append(holders[g], r.Name)
		}
	}
	row := regexp.MustCompile("^\\| `(\\w+)` (\\(|`(\\w+)`)[^|]*\\| ([^|]+)\\|$")
	storeKeys := map[string]string{"postgres url": "postgres", "postgres readonlyUrl": "postgres-readonly",
		"postgres webhookUrl": "postgres-webhook", "redis ratelimitUrl": "redis-limits"}
	seen := 0
	for _, line := range strings.Split(string(raw), "\n") {
		m := row.FindStringSubmatch(strings.TrimSpace(line))
		if m == nil {
			continue
		}
		group, planesCell := m[1], m[4]
		if m[3] != "" {
			if group = storeKeys[group+" "+m[3]]; group == "" {
				continue // postgres directUrl: the migrations Job's
			}
		}
		// "booking, worker", "admit: it signs…", "browse (as its only login)".
		cell := strings.TrimSpace(strings.FieldsFunc(planesCell, func(r rune) bool { return r == ':' || r == '(' })[0])
		var planes []string
		for _, p := range strings.Split(cell, ",") {
			planes = append(planes, strings.TrimSpace(p))
		}
		want := holders[group]
		if planes[0] == "all" {
			planes = all
			want = holders["redis"] // the row names redis and auth
			require.Equal(t, all, holders["auth"], "every role gets auth")
		}
		require.Equal(t, want, planes, "docs/operations.md's row for %s", group)
		seen++
	}
	require.GreaterOrEqual(t, seen, 7, "the table's rows were found")
}
