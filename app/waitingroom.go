package app

import (
	"context"
	"errors"
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
// verify keys, or in development (auth.dev_secrets) a key kept in the data
// folder, shared by every process started on it. Outside development there
// is no made-up key: a key of its own per process would sign passes no
// other plane accepts. Only the parts that sign or check passes ask for it
// (waitingroom.admit, waitingroom.verify); the worker never does.
func (a *App) passKeys() (*keyring.Ring, error) {
	cfg := a.Config.Waitingroom
	if cfg.SigningKey != "" || len(cfg.VerifyKeys) > 0 {
		return keyring.Parse(cfg.SigningKey, cfg.VerifyKeys)
	}
	if !a.Config.Auth.DevSecrets {
		return nil, errors.New("waitingroom: no pass keys configured and auth.dev_secrets is off: set waitingroom.signing_key on the admit plane and waitingroom.verify_keys on the booking plane (presenced keys generate)")
	}
	note := "waiting-room pass key (" + filepath.Join(a.Config.DataDir, "keys") + ")"
	a.mu.Lock()
	if !slices.Contains(a.devMode, note) {
		a.devMode = append(a.devMode, note)
	}
	a.mu.Unlock()
	return keyring.LoadOrCreateDev(a.Config.DataDir, "waitingroom-pass")
}
