package main

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The house's error rule: domain code returns typed or sentinel errors
// (each module's errors.go, internal/refusal), and only a module's
// handler files turn them into HTTP answers. Handler files are http.go and
// *_http.go; a socket's error frames are built in the socket handler's
// own file from the same domain errors.
const wirePkg = module + "/web/wire"

// httpShaped are the names of package wire that make an HTTP answer.
var httpShaped = map[string]bool{"Errorf": true, "BadRequest": true, "Unavailable": true, "Error": true}

// handlerFile tells whether name (a file's base name) is a handler file.
func handlerFile(name string) bool {
	return name == "http.go" || strings.HasSuffix(name, "_http.go")
}

// wireErrorUses lists, as file:line: what, each place in src (a Go file)
// that refers to wire.Errorf, wire.BadRequest, wire.Unavailable or the
// type wire.Error (a literal, new, a conversion, a declaration).
func wireErrorUses(fset *token.FileSet, path string, src any) ([]string, error) {
	f, err := parser.ParseFile(fset, path, src, parser.SkipObjectResolution)
	if err != nil {
		return nil, err
	}
	name := ""
	for _, spec := range f.Imports {
		if p, _ := strconv.Unquote(spec.Path.Value); p == wirePkg {
			name = "wire"
			if spec.Name != nil {
				name = spec.Name.Name
			}
		}
	}
	if name == "" || name == "_" {
		return nil, nil
	}
	var uses []string
	ast.Inspect(f, func(n ast.Node) bool {
		sel, ok := n.(*ast.SelectorExpr)
		if !ok {
			return true
		}
		if id, ok := sel.X.(*ast.Ident); ok && id.Name == name && httpShaped[sel.Sel.Name] {
			pos := fset.Position(sel.Pos())
			uses = append(uses, fmt.Sprintf("%s:%d: wire.%s", pos.Filename, pos.Line, sel.Sel.Name))
		}
		return true
	})
	return uses, nil
}

func TestDomainCodeRaisesNoHTTPErrors(t *testing.T) {
	t.Parallel()
	fset := token.NewFileSet()
	var broken []string
	files := 0
	for _, d := range domains {
		err := filepath.WalkDir(d, func(path string, e fs.DirEntry, err error) error {
			if err != nil || e.IsDir() || !strings.HasSuffix(path, ".go") ||
				strings.HasSuffix(path, "_test.go") || handlerFile(e.Name()) {
				return err
			}
			files++
			uses, err := wireErrorUses(fset, path, nil)
			broken = append(broken, uses...)
			return err
		})
		require.NoError(t, err)
	}
	require.Greater(t, files, 100, "the domain modules' files were read")
	require.Empty(t, broken, "HTTP errors raised outside handler files (return the module's errors.go kinds "+
		"and map them in its http.go):\n%s", strings.Join(broken, "\n"))
}

// The rule refuses what it is for: each use below is reported, with its
// line, under any import name; the shapes a domain may use pass.
func TestDomainErrorRuleRefusesWireErrors(t *testing.T) {
	t.Parallel()
	src := `package booking

import (
	"net/http"

	w "` + wirePkg + `"
)

func a() error { return w.Errorf(http.StatusConflict, "x", "y") }
func b() error { return w.BadRequest("y") }
func c() error { return w.Unavailable(0, "y") }
func d() error { return &w.Error{Status: 409} }
func e() error { return new(w.Error) }
func f(err error) bool { var e *w.Error; return err == e }
func g(b []byte, v any) error { return w.StrictJSON(b, v) }
`
	uses, err := wireErrorUses(token.NewFileSet(), "booking/bad.go", src)
	require.NoError(t, err)
	require.Equal(t, []string{
		"booking/bad.go:9: wire.Errorf", "booking/bad.go:10: wire.BadRequest", "booking/bad.go:11: wire.Unavailable",
		"booking/bad.go:12: wire.Error", "booking/bad.go:13: wire.Error", "booking/bad.go:14: wire.Error",
	}, uses)
	for _, name := range []string{"http.go", "stays_http.go"} {
		require.True(t, handlerFile(name), name)
	}
	for _, name := range []string{"holds.go", "httpx.go", "http_test.go", "gateway.go"} {
		require.False(t, handlerFile(name), name)
	}
	_, err = os.Stat("booking/http.go")
	require.NoError(t, err, "the handler files named here exist")
}
