package app

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"

	"github.com/presenced/presenced/booking"
	"github.com/presenced/presenced/internal/keyring"
	"github.com/presenced/presenced/internal/module"
	"github.com/presenced/presenced/viewers"
)

func viewersPart(start func(*viewers.Module, context.Context, module.Host) error) startFunc {
	return func(ctx context.Context, a *App, h module.Host) error {
		m, err := a.viewers()
		if err != nil {
			return err
		}
		return start(m, ctx, h)
	}
}

func (a *App) viewers() (*viewers.Module, error) {
	return a.mods.viewers.get(func() (*viewers.Module, error) {
		d := viewers.Deps{
			Config: a.Config.Viewers, Keys: a.Keys, CookieKeys: a.viewersKeyring,
			Hotels: hotelDirectory{a.Booking}, Metrics: a.Metrics, Log: a.Log.With("module", "viewers"),
		}
		return viewers.New(d)
	})
}

// viewersKeyring is the session cookie key ring: configured keys, or in
// development (auth.dev_secrets) a key kept under data_dir. Outside
// development there is no made-up key: each process would sign cookies the
// others refuse. Only the ingest plane asks for it.
func (a *App) viewersKeyring() (*keyring.Ring, error) {
	v := a.Config.Viewers
	if v.CookieSigningKey == "" && len(v.CookieVerifyKeys) == 0 {
		if !a.Config.Auth.DevSecrets {
			return nil, errors.New("viewers: no cookie keys configured and auth.dev_secrets is off: set viewers.cookie_signing_key on the ingest plane (presenced keys generate)")
		}
		note := "viewers cookie key (" + filepath.Join(a.Config.DataDir, "keys") + ")"
		a.mu.Lock()
		if !slices.Contains(a.devMode, note) {
			a.devMode = append(a.devMode, note)
		}
		a.mu.Unlock()
		r, err := keyring.LoadOrCreateDev(a.Config.DataDir, "viewers-cookie")
		if err != nil {
			return nil, fmt.Errorf("viewers: development cookie key: %w", err)
		}
		return r, nil
	}
	r, err := keyring.Parse(v.CookieSigningKey, v.CookieVerifyKeys)
	if err != nil {
		return nil, fmt.Errorf("viewers.cookie_signing_key / cookie_verify_keys: %w", err)
	}
	return r, nil
}

// hotelDirectory tells viewers which hotels exist: booking's hotels,
// listed through its in-process API (the booking.directory part).
type hotelDirectory struct {
	booking func() (*booking.Module, error)
}

func (d hotelDirectory) HotelsSince(ctx context.Context, cursor int64, limit int) ([]string, int64, error) {
	b, err := d.booking()
	if err != nil {
		return nil, cursor, err
	}
	return b.HotelsSince(ctx, cursor, limit)
}
