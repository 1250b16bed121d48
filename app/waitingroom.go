package app

import (
	"context"
	"errors"
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
	// Only the admit plane signs passes (and publishes their keys); the
	// worker's admission ticker never touches a pass and needs no keys.
	ring, err := a.passKeys(slices.Contains(a.parts, "waitingroom.admit"))
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
// verify keys, or in development (auth.dev_secrets) a key kept in the data
// folder, shared by every process started on it. Outside development there
// is no made-up key: a key of its own per process would sign passes no
// other plane accepts. Then a process that needs the keys fails, and one
// that does not gets a nil ring.
func (a *App) passKeys(needed bool) (*keyring.Ring, error) {
	cfg := a.Config.Waitingroom
	if cfg.SigningKey != "" || len(cfg.VerifyKeys) > 0 {
		return keyring.Parse(cfg.SigningKey, cfg.VerifyKeys)
	}
	if !a.Config.Auth.DevSecrets {
		if !needed {
			return nil, nil
		}
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

// admissionVerifier checks admission passes against live leases, for the
// booking plane; it needs only public keys. The expiry worker only
// releases leases and verifies no pass.
func (a *App) admissionVerifier(ctx context.Context) (*waitingroom.Verifier, error) {
	rdb, err := a.Redis(ctx)
	if err != nil {
		return nil, err
	}
	ring, err := a.passKeys(slices.Contains(a.parts, "booking.holds"))
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
