package main

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"gopkg.in/yaml.v3"

	"github.com/presenced/presenced/app"
	"github.com/presenced/presenced/config"
	"github.com/presenced/presenced/internal/keyring"
)

// There is no Docker engine here: the Dockerfile and compose file are kept
// honest by reading them.
func TestDockerfile(t *testing.T) {
	t.Parallel()
	f, err := os.Open("Dockerfile")
	require.NoError(t, err)
	defer f.Close()
	var froms, users, args, copies []string
	var build string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case strings.HasPrefix(line, "FROM "):
			froms = append(froms, line)
		case strings.HasPrefix(line, "ARG "):
			args = append(args, strings.TrimPrefix(line, "ARG "))
		case strings.HasPrefix(line, "COPY "):
			copies = append(copies, line)
		case strings.HasPrefix(line, "USER "):
			users = append(users, strings.TrimPrefix(line, "USER "))
		case strings.HasPrefix(line, "RUN ") && strings.Contains(line, "go build"):
			build = line
		}
	}
	require.GreaterOrEqual(t, len(froms), 2, "multi-stage build")
	require.Contains(t, froms[0], " AS build")
	require.Contains(t, build, "CGO_ENABLED=0", "static binary")
	// .git stays out of the context, so the version and commit come in as
	// build arguments for `presenced version`.
	require.Contains(t, args, "VERSION=dev")
	require.Contains(t, args, "COMMIT=unknown")
	require.Contains(t, build, "-X github.com/presenced/presenced/cli.Version=${VERSION}")
	require.Contains(t, build, "-X github.com/presenced/presenced/cli.Commit=${COMMIT}")
	require.NotEmpty(t, users, "the final image runs as a named user")
	user := strings.Split(users[len(users)-1], ":")[0]
	require.NotContains(t, []string{"root", "0"}, user)
	// The run stage pulls nothing: a machine without a registry builds it
	// too (scripts/compose-images), from a binary built outside when
	// BUILD_IMAGE has no Go.
	require.Equal(t, "FROM scratch", froms[len(froms)-1])
	require.Contains(t, args, "BUILD_IMAGE=golang:1.26-bookworm")
	require.Contains(t, args, "PRESENCED_BINARY=")
	require.Contains(t, build, `install -D -m 0755 "$PRESENCED_BINARY" /out/usr/local/bin/presenced`)
	require.Contains(t, copies, "COPY --from=build /out/ /")
	for _, c := range copies {
		require.NotContains(t, c, "config.yaml", "nothing in the image reads a configuration file")
	}
}

func TestComposeSplitsRoles(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("docker-compose.yml")
	require.NoError(t, err)
	var doc struct {
		Services map[string]struct {
			Image       string            `yaml:"image"`
			Build       any               `yaml:"build"`
			Command     []string          `yaml:"command"`
			Environment map[string]string `yaml:"environment"`
			Healthcheck any               `yaml:"healthcheck"`
		} `yaml:"services"`
	}
	require.NoError(t, yaml.Unmarshal(raw, &doc))
	// A registry's well-known images by default; a machine without one
	// names its stand-ins (scripts/compose-images prints the variables).
	for svc, want := range map[string]string{"redis": "REDIS_IMAGE redis:7", "postgres": "POSTGRES_IMAGE postgres:16"} {
		variable, image := composeDefault(t, doc.Services[svc].Image)
		require.True(t, strings.HasPrefix(variable+" "+image, want), "%s: image %s", svc, doc.Services[svc].Image)
	}

	var roleSets [][]string
	covered := map[string]bool{}
	var signing, verify string
	for name, svc := range doc.Services {
		require.NotNil(t, svc.Healthcheck, "%s has a health check (.ci/compose waits for them)", name)
		if svc.Build == nil {
			continue
		}
		variable, _ := composeDefault(t, svc.Image)
		require.Equal(t, "PRESENCED_IMAGE", variable, name)
		i := slices.Index(svc.Command, "--roles")
		require.Positive(t, i, "%s names its roles", name)
		roles, _, err := app.ResolveRoles([]string{svc.Command[i+1]})
		require.NoError(t, err, name)
		roleSets = append(roleSets, roles)
		for _, r := range roles {
			covered[r] = true
		}
		requireRolesSettings(t, name, svc.Environment, roles)
		require.Equal(t, "false", svc.Environment["PRESENCED_AUTH_DEV_SECRETS"], name)
		// Development keys are per container: a split deployment must share
		// the pass keys, or booking cannot verify the admit plane's passes.
		if slices.Contains(roles, "admit") {
			signing = svc.Environment["PRESENCED_WAITINGROOM_SIGNING_KEY"]
		}
		if slices.Contains(roles, "booking") && !slices.Contains(roles, "admit") {
			verify = svc.Environment["PRESENCED_WAITINGROOM_VERIFY_KEYS"]
		}
		// Outside development, payments needs its provider and keys.
		if slices.Contains(roles, "booking") || slices.Contains(roles, "worker") {
			for _, k := range []string{"PRESENCED_PAYMENTS_PRIMARY", "PRESENCED_PAYMENTS_TICKET_KEY", "PRESENCED_PAYMENTS_MANIFEST_KEY"} {
				require.NotEmpty(t, svc.Environment[k], "%s of %s", k, name)
			}
		}
	}
	signer, err := keyring.Parse(signing, nil)
	require.NoError(t, err, "the admit plane's pass key")
	checker, err := keyring.Parse("", []string{verify})
	require.NoError(t, err, "the booking plane's verify key")
	kid, sig, err := signer.Sign([]byte("pass"))
	require.NoError(t, err)
	require.True(t, checker.Verify(kid, []byte("pass"), sig), "the two halves belong together")
	require.GreaterOrEqual(t, len(roleSets), 2, "presenced runs at least twice")
	require.NotEqual(t, roleSets[0], roleSets[1])
	for _, r := range app.RoleNames() {
		if r != "all" {
			require.True(t, covered[r], "role %s runs somewhere", r)
		}
	}
}

// composeDefault splits compose's ${VARIABLE:-default}.
func composeDefault(t *testing.T, image string) (variable, def string) {
	t.Helper()
	m := regexp.MustCompile(`^\$\{(\w+):-([^}]+)\}$`).FindStringSubmatch(image)
	require.NotNil(t, m, "image %q is ${VARIABLE:-default}", image)
	return m[1], m[2]
}

// requireRolesSettings holds a container's environment to the role table
// (presenced roles --json): every setting its roles' stores and secret
// groups require is set, and none of another group is.
func requireRolesSettings(t *testing.T, name string, env map[string]string, roles []string) {
	t.Helper()
	table := app.RoleTable()
	required, allowed := table.SettingsFor(roles...)
	var grouped []string
	for _, settings := range table.Settings {
		grouped = append(grouped, settings...)
	}
	set := func(key string) bool {
		return slices.ContainsFunc(config.EnvNames(key), func(e string) bool { return env[e] != "" })
	}
	for _, key := range required {
		require.True(t, set(key), "%s: its roles %v need %s (presenced roles --json)", name, roles, key)
	}
	for _, key := range grouped {
		if set(key) {
			require.Contains(t, allowed, key, "%s: its roles %v do not need %s", name, roles, key)
		}
	}
}

func buildBinary(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "presenced")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	require.NoError(t, err, string(out))
	return bin
}

func TestCommandLine(t *testing.T) {
	t.Parallel()
	bin := buildBinary(t)
	data := t.TempDir()
	run := func(args ...string) (string, string, int) {
		cmd := exec.Command(bin, args...)
		cmd.Env = append(os.Environ(), "PRESENCED_DATA_DIR="+data)
		var stdout, stderr strings.Builder
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		}
		return stdout.String(), stderr.String(), code
	}

	_, stderr, code := run("serve", "--roles", "ingest,bogus")
	require.Equal(t, 1, code)
	require.Equal(t, 1, strings.Count(strings.TrimSpace(stderr), "\n")+1, "one line: %q", stderr)
	require.Contains(t, stderr, "valid roles are ingest, count, presence, admit, browse, booking, worker, all")

	_, stderr, code = run("serve", "--roles=")
	require.Equal(t, 1, code)
	require.Contains(t, stderr, "valid roles are")

	cmd := exec.Command(bin, "serve")
	cmd.Env = append(os.Environ(), "PRESENCED_HTTP_SHUTDOWN_TIMEOUT=soon")
	out, err := cmd.CombinedOutput()
	require.Error(t, err)
	require.Contains(t, string(out), "PRESENCED_HTTP_SHUTDOWN_TIMEOUT")
	require.Contains(t, string(out), "http.shutdown_timeout")

	// No server has run on this data folder: a token signed with new
	// secrets would be refused by whichever server the user means.
	secrets := filepath.Join(data, "dev-secrets.json")
	tok, stderr, code := run("token", "--user", "alice", "--ttl", "10m")
	require.Equal(t, 1, code)
	require.Empty(t, tok)
	require.Contains(t, stderr, "no development secrets at "+secrets)
	require.Contains(t, stderr, "--data-dir")
	require.Contains(t, stderr, "--create-secrets")
	require.NoFileExists(t, secrets)
	tok, stderr, code = run("token", "--user", "alice", "--ttl", "10m", "--create-secrets")
	require.Zero(t, code, stderr)
	require.Equal(t, 3, len(strings.Split(strings.TrimSpace(tok), ".")), "a JWT on stdout only")
	require.Contains(t, stderr, "new development secrets created at "+secrets)
	key1, stderr, _ := run("token", "--api-key")
	require.Contains(t, stderr, "development secrets from "+secrets, "says which file it used")
	key2, _, _ := run("token", "--api-key", "--data-dir", data)
	require.NotEmpty(t, strings.TrimSpace(key1))
	require.Equal(t, key1, key2, "the development API key is generated once")
	_, stderr, code = run("token", "--api-key", "--data-dir", t.TempDir())
	require.Equal(t, 1, code, "--data-dir points at a folder without secrets")
	require.Contains(t, stderr, "no development secrets")
	_, stderr, code = run("token")
	require.Equal(t, 1, code)
	require.Contains(t, stderr, "--user")
	// The server's own rule for user ids: it would refuse these tokens.
	for _, bad := range []string{"alice smith", "a{b}", strings.Repeat("x", 129)} {
		_, stderr, code = run("token", "--user", bad)
		require.Equal(t, 1, code, bad)
		require.Contains(t, stderr, "--user: ", bad)
	}

	stdout, _, code := run("roles")
	require.Zero(t, code)
	require.Contains(t, stdout, "waitingroom.admit")
	stdout, _, code = run("version")
	require.Zero(t, code)
	require.Contains(t, stdout, "presenced")

	// A load run that failed says so in its exit status.
	stdout, stderr, code = run("loadgen", "http", "--target", "http://"+deadAddr(t), "-d", "1s", "-c", "2")
	require.Equal(t, 1, code, stdout)
	require.Contains(t, stderr, "more than --max-errors 1%")
	require.Contains(t, stdout, "errors", "the summary comes first")

	// Serve's flags are serve's: other commands neither list nor take them.
	stdout, _, code = run("roles", "--help")
	require.Zero(t, code)
	require.NotContains(t, stdout, "--redis-url")
	_, stderr, code = run("version", "--listen", ":1")
	require.Equal(t, 1, code)
	require.Contains(t, stderr, "unknown flag: --listen")
	for _, c := range []string{"serve", "token", "token check", "healthcheck", "config print", "config check", "migrate", "demo", "loadgen", "roles", "keys generate", "version"} {
		stdout, _, code = run(append(strings.Fields(c), "--help")...)
		require.Zero(t, code, c)
		require.Contains(t, stdout, "Examples:", "%s --help shows examples", c)
	}
}

// The version names the commit: from -ldflags as the Dockerfile stamps it,
// or from Go's VCS stamp in a git checkout.
func TestVersionNamesTheCommit(t *testing.T) {
	t.Parallel()
	bin := filepath.Join(t.TempDir(), "presenced")
	ld := "-X github.com/presenced/presenced/cli.Version=v9.8.7 -X github.com/presenced/presenced/cli.Commit=0123456789abcdef0123"
	out, err := exec.Command("go", "build", "-ldflags", ld, "-o", bin, ".").CombinedOutput()
	require.NoError(t, err, string(out))
	for _, args := range [][]string{{"version"}, {"--version"}} {
		out, err = exec.Command(bin, args...).Output()
		require.NoError(t, err)
		require.True(t, strings.HasPrefix(string(out), "presenced v9.8.7 (0123456789ab, go"), "%v: %s", args, out)
	}

	// Without -X, the commit is Go's VCS stamp, when the checkout gave one.
	out, err = exec.Command("go", "build", "-buildvcs=auto", "-o", bin, ".").CombinedOutput()
	require.NoError(t, err, string(out))
	info, err := exec.Command("go", "version", "-m", bin).Output()
	require.NoError(t, err)
	out, err = exec.Command(bin, "version").Output()
	require.NoError(t, err)
	_, rev, stamped := strings.Cut(string(info), "vcs.revision=")
	if !stamped {
		require.Contains(t, string(out), "presenced dev (unknown commit")
		return
	}
	require.Contains(t, string(out), "presenced dev ("+rev[:12])
}
