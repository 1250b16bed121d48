package main

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// Every error code a module declares (an exported Code… string constant)
// is named in the docs, where a client looks it up: unknown_provider,
// ticket_not_found and intent_not_found were answered but written nowhere.
func TestEveryErrorCodeIsDocumented(t *testing.T) {
	t.Parallel()
	var text strings.Builder
	mds, err := filepath.Glob("docs/*.md")
	require.NoError(t, err)
	for _, f := range append(mds, "docs/openapi.yaml", "docs/asyncapi.yaml") {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		text.Write(b)
	}
	docs := text.String()
	codes := declaredCodes(t)
	require.NotEmpty(t, codes)
	var missing []string
	for code, where := range codes {
		if !regexp.MustCompile(`(^|[^a-z_])` + regexp.QuoteMeta(code) + `($|[^a-z_])`).MatchString(docs) {
			missing = append(missing, code+" ("+where+")")
		}
	}
	require.Empty(t, missing, "error codes answered but named in no doc")
}

// declaredCodes maps each exported Code… constant's value to where it is
// declared, across the module's non-test Go files.
func declaredCodes(t *testing.T) map[string]string {
	t.Helper()
	codes := map[string]string{}
	fset := token.NewFileSet()
	err := filepath.WalkDir(".", func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "var" || d.Name() == "node_modules" || strings.HasPrefix(d.Name(), ".")) && path != "." {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		for _, decl := range f.Decls {
			g, ok := decl.(*ast.GenDecl)
			if !ok || g.Tok != token.CONST {
				continue
			}
			for _, spec := range g.Specs {
				vs := spec.(*ast.ValueSpec)
				for i, name := range vs.Names {
					if !strings.HasPrefix(name.Name, "Code") || !name.IsExported() || i >= len(vs.Values) {
						continue
					}
					lit, ok := vs.Values[i].(*ast.BasicLit)
					if !ok || lit.Kind != token.STRING {
						continue
					}
					v, err := strconv.Unquote(lit.Value)
					if err == nil && regexp.MustCompile(`^[a-z][a-z_]+$`).MatchString(v) {
						codes[v] = path + " " + name.Name
					}
				}
			}
		}
		return nil
	})
	require.NoError(t, err)
	return codes
}
