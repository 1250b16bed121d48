package testenv

import (
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

var (
	binOnce sync.Once
	binPath string
	binErr  error
	binOut  []byte
)

// Binary builds the presenced binary once per test process (removed when
// the tests end, see Main), for tests that need real processes of their
// own: signals, a split cluster.
func Binary(t testing.TB) string {
	t.Helper()
	binOnce.Do(func() {
		dir, err := os.MkdirTemp("", "presenced-bin-")
		if err != nil {
			binErr = err
			return
		}
		atExit(func() { _ = os.RemoveAll(dir) })
		binPath = filepath.Join(dir, "presenced")
		binOut, binErr = exec.Command("go", "build", "-o", binPath, "github.com/presenced/presenced").CombinedOutput()
	})
	if binErr != nil {
		t.Fatalf("build presenced: %v\n%s", binErr, binOut)
	}
	return binPath
}
