package app

import (
	"context"
	"path/filepath"
	"slices"

	"github.com/presenced/presenced/internal/keyring"
	"github.com/presenced/presenced/waitingroom"
)

// The waiting room's two parts (admit: join, status, sockets, keys, admin;
// worker: the admission ticker) share one module per process, built by
// whichever part starts first.
func (a *App) waitingroom(ctx context.Context) (*waitingroom.Module, error) {
	v, err := a.memo("waitingroom", func() (any, error) { return a.buildWaitingroom(ctx) })
	if err != nil {
		return nil, err
	}
	return v.(*waitingroom.Module), nil
}

func (a *App) buildWaitingroom(ctx context.Context) (*waitingroom.Module, error) {
	rdb, err := a.Redis(ctx)
	if err != nil {
		return nil, err
	}
	h, err := a.Hub(ctx)
	if err != nil {
		return nil, err
	}
	ring, err := a.passKeys()
	if err != nil {
		return nil, err
	}
	m, err := waitingroom.New(waitingroom.Deps{
		Redis: rdb, Keys: a.Keys, Hub: h, Ring: ring, Config: a.Config.Waitingroom,
		Metrics: a.Metrics, Log: a.Log.With("module", "waitingroom"),
	})
	if err != nil {
		return nil, err
	}
	return m, nil
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

// admissionVerifier checks admission passes against live leases, for the
// booking plane. It needs only public keys.
func (a *App) admissionVerifier(ctx context.Context) (*waitingroom.Verifier, error) {
	rdb, err := a.Redis(ctx)
	if err != nil {
		return nil, err
	}
	ring, err := a.passKeys()
	if err != nil {
		return nil, err
	}
	return waitingroom.NewVerifier(rdb, a.Keys, ring, a.Config.Waitingroom.StoreTimeout), nil
}

func startWaitingroomAdmit(a *App) error {
	m, err := a.waitingroom(context.Background())
	if err != nil {
		return err
	}
	users, err := a.Users()
	if err != nil {
		return err
	}
	return m.Mount(a.Routes(), waitingroom.Routes{
		Sockets: a.Server.Sockets, RequireUser: users.Middleware(), RequireAPIKey: a.RequireAPIKey(),
	})
}

func startWaitingroomTicker(a *App) error {
	m, err := a.waitingroom(context.Background())
	if err != nil {
		return err
	}
	a.Go("waitingroom.ticker", m.RunTicker)
	return nil
}
