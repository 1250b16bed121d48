package devfile

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// Writers racing on one path all end up with the first one's content, and
// a reader never sees a partial file.
func TestCreateOnceUnderARace(t *testing.T) {
	t.Parallel()
	for round := 0; round < 20; round++ {
		path := filepath.Join(t.TempDir(), "keys", "secret.json")
		var wg sync.WaitGroup
		got := make([][]byte, 16)
		errs := make([]error, len(got))
		for i := range got {
			wg.Add(1)
			go func() {
				defer wg.Done()
				got[i], errs[i] = CreateOnce(path, []byte(fmt.Sprintf(`{"writer":%d,"padding":"%0512d"}`, i, 0)), 0o600)
			}()
		}
		wg.Wait()
		for i := range got {
			require.NoError(t, errs[i])
			require.Equal(t, string(got[0]), string(got[i]))
		}
		onDisk, err := os.ReadFile(path)
		require.NoError(t, err)
		require.Equal(t, string(got[0]), string(onDisk))
		st, err := os.Stat(path)
		require.NoError(t, err)
		require.Equal(t, os.FileMode(0o600), st.Mode().Perm())
		left, err := os.ReadDir(filepath.Dir(path))
		require.NoError(t, err)
		require.Len(t, left, 1, "no temporary files left behind")
	}
}
