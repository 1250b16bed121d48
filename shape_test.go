package main

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The module shape (docs/architecture.md): a domain module's exported
// names — what app, cli, loadgen and the module's clients may use — are
// declared in four files only, so a reader finds its whole surface there:
//
//   - module.go: Deps, Module, New and one StartX per part;
//   - api.go: the in-process API and the ports the module needs;
//   - protocol.go: the wire protocol's bodies, events, frames and codes;
//   - errors.go: the errors the in-process API returns.
//
// A module's sub-packages (payments/gate, payments/ticketcode) are
// libraries with their own surface, not modules, and are not held to it.
var surfaceFiles = []string{"module.go", "api.go", "protocol.go", "errors.go"}

func TestModuleShape(t *testing.T) {
	t.Parallel()
	var misplaced []string
	for _, d := range domains {
		files, err := filepath.Glob(filepath.Join(d, "*.go"))
		require.NoError(t, err)
		require.NotEmpty(t, files, "module %s has Go files", d)
		for _, path := range files {
			src, err := os.ReadFile(path)
			require.NoError(t, err)
			misplaced = append(misplaced, exportsOutsideSurface(t, path, src)...)
		}
		_, err = os.Stat(filepath.Join(d, "module.go"))
		require.NoError(t, err, "module %s has a module.go", d)
	}
	require.Empty(t, misplaced, "exported outside module.go, api.go, protocol.go and errors.go:\n%s",
		strings.Join(misplaced, "\n"))
}

// exportsOutsideSurface lists the exported declarations of one file that
// are not in a surface file: top-level names, and methods with exported
// names on exported types.
func exportsOutsideSurface(t *testing.T, path string, src []byte) []string {
	t.Helper()
	name := filepath.Base(path)
	if strings.HasSuffix(name, "_test.go") || slices.Contains(surfaceFiles, name) {
		return nil
	}
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, path, src, parser.SkipObjectResolution)
	require.NoError(t, err)
	var out []string
	report := func(pos token.Pos, what string) {
		out = append(out, fmt.Sprintf("%s: %s", fset.Position(pos), what))
	}
	for _, decl := range f.Decls {
		switch decl := decl.(type) {
		case *ast.FuncDecl:
			if !decl.Name.IsExported() {
				continue
			}
			if decl.Recv == nil {
				report(decl.Pos(), "func "+decl.Name.Name)
			} else if recv := receiverType(decl.Recv.List[0].Type); ast.IsExported(recv) {
				report(decl.Pos(), "method "+recv+"."+decl.Name.Name)
			}
		case *ast.GenDecl:
			for _, spec := range decl.Specs {
				switch spec := spec.(type) {
				case *ast.TypeSpec:
					if spec.Name.IsExported() {
						report(spec.Pos(), "type "+spec.Name.Name)
					}
				case *ast.ValueSpec:
					for _, n := range spec.Names {
						if n.IsExported() {
							report(n.Pos(), decl.Tok.String()+" "+n.Name)
						}
					}
				}
			}
		}
	}
	return out
}

// receiverType names a method's receiver type (T, *T, T[P] and *T[P]).
func receiverType(e ast.Expr) string {
	for {
		switch x := e.(type) {
		case *ast.StarExpr:
			e = x.X
		case *ast.IndexExpr:
			e = x.X
		case *ast.IndexListExpr:
			e = x.X
		case *ast.Ident:
			return x.Name
		default:
			return ""
		}
	}
}

// The shape test reports what it is for: each export below is misplaced.
func TestModuleShapeRefusesExportsElsewhere(t *testing.T) {
	t.Parallel()
	src := []byte(`package booking
type Hold struct{}
type plane struct{}
func Open() {}
func (Hold) Seats() {}
func (*plane) Serve() {}
func (p plane) serve() {}
var ErrLate, early = 1, 2
const Max = 3
`)
	got := exportsOutsideSurface(t, "booking/holds.go", src)
	require.Len(t, got, 5, "%v", got)
	for i, want := range []string{"type Hold", "func Open", "method Hold.Seats", "var ErrLate", "const Max"} {
		require.Contains(t, got[i], want)
	}
	require.Empty(t, exportsOutsideSurface(t, "booking/api.go", src))
	require.Empty(t, exportsOutsideSurface(t, "booking/holds_test.go", src))
}
