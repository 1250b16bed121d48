package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The image build context must never carry the development state: var/
// holds the private database and dev-secrets.json, and COPY . . would
// bake them into a layer.
func TestDockerignoreKeepsDevelopmentStateOut(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile(".dockerignore")
	require.NoError(t, err)
	patterns := parseDockerignore(string(raw))
	for _, p := range []string{"var", "var/dev-secrets.json", "var/postgres/PG_VERSION", "var/keys/waitingroom-pass.json", ".git/config"} {
		require.True(t, dockerIgnored(patterns, p), "%s stays out of the build context", p)
	}
	for _, p := range []string{"go.mod", "main.go", "config.yaml", "store/migrations/0001_readonly_login.sql", "viewers/lua/bundle.lua"} {
		require.False(t, dockerIgnored(patterns, p), "%s is needed to build", p)
	}
}

type ignoreRule struct {
	re     *regexp.Regexp
	negate bool
}

// parseDockerignore reads patterns the way docker does: comments and blank
// lines skipped, paths cleaned and relative to the context root, ** for any
// number of folders, ! re-including.
func parseDockerignore(s string) []ignoreRule {
	var rules []ignoreRule
	for _, line := range strings.Split(s, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		r := ignoreRule{}
		if strings.HasPrefix(line, "!") {
			r.negate, line = true, strings.TrimSpace(line[1:])
		}
		line = strings.TrimPrefix(filepath.ToSlash(filepath.Clean(line)), "/")
		var re strings.Builder
		re.WriteString("^")
		for i := 0; i < len(line); i++ {
			switch {
			case strings.HasPrefix(line[i:], "**/"):
				re.WriteString("(.*/)?")
				i += 2
			case strings.HasPrefix(line[i:], "**"):
				re.WriteString(".*")
				i++
			case line[i] == '*':
				re.WriteString("[^/]*")
			case line[i] == '?':
				re.WriteString("[^/]")
			default:
				re.WriteString(regexp.QuoteMeta(line[i : i+1]))
			}
		}
		re.WriteString("$")
		r.re = regexp.MustCompile(re.String())
		rules = append(rules, r)
	}
	return rules
}

// dockerIgnored tells whether path, or a folder it is in, is excluded; the
// last matching rule wins.
func dockerIgnored(rules []ignoreRule, path string) bool {
	ignored := false
	parts := strings.Split(path, "/")
	for _, r := range rules {
		for i := 1; i <= len(parts); i++ {
			if r.re.MatchString(strings.Join(parts[:i], "/")) {
				ignored = !r.negate
				break
			}
		}
	}
	return ignored
}
