package app

import (
	"context"
	"path/filepath"
	"slices"

	"github.com/presenced/presenced/internal/keyring"
	"github.com/presenced/presenced/internal/module"
	"github.com/presenced/presenced/waitingroom"
)

func waitingroomPart(start func(*waitingroom.Module, context.Context, module.Host) error) startFunc {
	return func(ctx context.Context, a *App, h module.Host) error {
		m, err := a.waitingroom()
		if err != nil {
			return err
		}
		return start(m, ctx, h)
	}
}

func (a *App) waitingroom() (*waitingroom.Module, error) {
	return a.mods.waitingroom.get(func() (*waitingroom.Module, error) {
		return waitingroom.New(waitingroom.Deps{
			Config: a.Config.Waitingroom, Keys: a.Keys, PassKeys: a.passKeys,
			Metrics: a.Metrics, Log: a.Log.With("module", "waitingroom"),
		})
	})
}

// passKeys is the keyring of admission passes: the configured signing and
// verify keys, or in development a key kept in the data folder (shared by
// every process started on it).
func (a *App) passKeys() (*keyring.Ring, error) {
	cfg := a.Config.Waitingroom
	if cfg.SigningKey != "" || len(cfg.VerifyKeys) > 0 {
		return keyring.Parse(cfg.SigningKey, cfg.VerifyKeys)
	}
	note := "waiting-room pass key (" + filepath.Join(a.Config.DataDir, "keys") + ")"
	a.mu.Lock()
	if !slices.Contains(a.devMode, note) {
		a.devMode = append(a.devMode, note)
	}
	a.mu.Unlock()
	return keyring.LoadOrCreateDev(a.Config.DataDir, "waitingroom-pass")
}
