// Package devfile writes the development state files (secrets, keys) that
// several processes started together on one data folder may race to
// create.
package devfile

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// CreateOnce writes data to path unless path exists, and returns what path
// holds afterwards: data when this call created it, the first writer's
// content otherwise. The file appears whole or not at all (written to a
// temporary file, then hard-linked into place, which fails if another
// writer got there first), so no reader ever sees it half written.
func CreateOnce(path string, data []byte, perm os.FileMode) ([]byte, error) {
	if b, err := os.ReadFile(path); err == nil {
		return b, nil
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create %s: %w", dir, err)
	}
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".*")
	if err != nil {
		return nil, fmt.Errorf("write %s: %w", path, err)
	}
	defer os.Remove(tmp.Name())
	_, werr := tmp.Write(data)
	cerr := tmp.Close()
	if err := errors.Join(werr, cerr, os.Chmod(tmp.Name(), perm)); err != nil {
		return nil, fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Link(tmp.Name(), path); err != nil {
		if errors.Is(err, os.ErrExist) {
			return os.ReadFile(path)
		}
		return nil, fmt.Errorf("write %s: %w", path, err)
	}
	return data, nil
}
