package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"go/parser"
	"go/token"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The house's import rules, for what goes into the binary (tests may
// cross them: an end-to-end test drives several modules):
//
//   - a domain module never imports another;
//   - web, store, config and internal/... never import a domain module or
//     app;
//   - only app (the wiring), cli (the commands) and loadgen (a client of the
//     modules' protocols) import domain modules;
//   - nothing imports a test harness but another harness.
const module = "github.com/presenced/presenced"

var domains = []string{"presence", "viewers", "waitingroom", "booking", "payments"}

// harnesses are the packages made for tests.
var harnesses = []string{"app/apptest", "internal/testenv", "internal/spectest", "internal/module/moduletest",
	"internal/metricscheck", "internal/cluster", "internal/contract", "faults"}

// domainOf names the domain module pkg belongs to ("" for none).
func domainOf(pkg string) string {
	for _, d := range domains {
		if pkg == d || strings.HasPrefix(pkg, d+"/") {
			return d
		}
	}
	return ""
}

func under(pkg string, roots ...string) bool {
	for _, r := range roots {
		if pkg == r || strings.HasPrefix(pkg, r+"/") {
			return true
		}
	}
	return false
}

// forbidden says why the import from → to breaks a rule, or "" when it
// does not. Both are paths inside the module.
func forbidden(from, to string) string {
	fromHarness := under(from, harnesses...)
	switch {
	case under(to, harnesses...):
		if !fromHarness {
			return "only test harnesses import a test harness"
		}
	case to == "app":
		if !fromHarness && !under(from, "cli") {
			return "only cli (and test harnesses) import app"
		}
	case domainOf(to) != "":
		switch {
		case domainOf(from) == domainOf(to), fromHarness, under(from, "app", "cli", "loadgen"):
		case domainOf(from) != "":
			return "a domain module never imports another"
		default:
			return "only app, cli and loadgen import a domain module"
		}
	}
	return ""
}

// repoRoot is where go test runs this package: the module's root.
var repoRoot, _ = filepath.Abs(".")

type listedPackage struct {
	ImportPath string
	Dir        string
	GoFiles    []string
	Imports    []string
}

func TestImportRules(t *testing.T) {
	t.Parallel()
	out, err := exec.Command("go", "list", "-json", "./...").Output()
	require.NoError(t, err)
	dec := json.NewDecoder(bytes.NewReader(out))
	var broken []string
	packages := 0
	for dec.More() {
		var p listedPackage
		require.NoError(t, dec.Decode(&p))
		packages++
		from := strings.TrimPrefix(strings.TrimPrefix(p.ImportPath, module), "/")
		for _, imp := range p.Imports {
			if !strings.HasPrefix(imp, module+"/") {
				continue
			}
			to := strings.TrimPrefix(imp, module+"/")
			if why := forbidden(from, to); why != "" {
				broken = append(broken, fmt.Sprintf("%s imports %s (%s): %s",
					from, to, strings.Join(filesImporting(t, p, imp), ", "), why))
			}
		}
	}
	require.Greater(t, packages, 40, "go list found the packages")
	require.Empty(t, broken, "forbidden imports:\n%s", strings.Join(broken, "\n"))
}

// filesImporting names the files of p that import imp.
func filesImporting(t *testing.T, p listedPackage, imp string) []string {
	var files []string
	for _, name := range p.GoFiles {
		path := filepath.Join(p.Dir, name)
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly)
		require.NoError(t, err)
		for _, spec := range f.Imports {
			if v, _ := strconv.Unquote(spec.Path.Value); v == imp {
				if rel, err := filepath.Rel(repoRoot, path); err == nil {
					path = rel
				}
				files = append(files, path)
			}
		}
	}
	return files
}

// The rules refuse what they are for: each bad edge below is reported.
func TestImportRulesRefuseBadEdges(t *testing.T) {
	t.Parallel()
	for _, edge := range [][2]string{
		{"booking", "waitingroom"}, {"payments", "booking"}, {"presence", "viewers/scanner"},
		{"web", "presence"}, {"store", "booking"}, {"config", "app"}, {"internal/outbox", "payments"},
		{"internal/hub", "app"}, {"web/pages", "booking"}, {"booking", "internal/testenv"},
		{"internal/auth", "app/apptest"}, {"app", "internal/spectest"}, {"presence", "app"},
	} {
		require.NotEmpty(t, forbidden(edge[0], edge[1]), "%s → %s must be refused", edge[0], edge[1])
	}
	for _, edge := range [][2]string{
		{"app", "booking"}, {"cli", "payments/gate"}, {"loadgen/booking", "booking"}, {"payments", "payments/ticketcode"},
		{"booking", "web"}, {"cli", "app"}, {"app/apptest", "app"}, {"internal/metricscheck", "app/apptest"},
		{"web/pages", "internal/auth"}, {"app", "internal/outbox"},
	} {
		require.Empty(t, forbidden(edge[0], edge[1]), "%s → %s is allowed", edge[0], edge[1])
	}
	require.False(t, slices.Contains(domains, "web"))
}
