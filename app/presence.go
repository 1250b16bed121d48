package app

import (
	"context"
	"slices"

	"github.com/presenced/presenced/config"
	"github.com/presenced/presenced/internal/auth"
	"github.com/presenced/presenced/presence"
	"github.com/presenced/presenced/store"
)

// The presence module is built once per process and shared by its parts
// (gateway, read API, lifecycle).
func presenceModule(a *App) (*presence.Module, error) {
	m, err := a.memo("presence", func() (any, error) { return buildPresence(a) })
	if err != nil {
		return nil, err
	}
	return m.(*presence.Module), nil
}

func buildPresence(a *App) (*presence.Module, error) {
	ctx := context.Background()
	rdb, err := a.Redis(ctx)
	if err != nil {
		return nil, err
	}
	h, err := a.Hub(ctx)
	if err != nil {
		return nil, err
	}
	var contacts *presence.Contacts
	var users *auth.Verifier
	// The worker (lifecycle only) needs neither PostgreSQL nor user tokens.
	if slices.Contains(a.parts, "presence.gateway") || slices.Contains(a.parts, "presence.read") {
		pool, err := a.Postgres(ctx, store.PoolMain)
		if err != nil {
			return nil, err
		}
		contacts = presence.NewContacts(pool)
		if users, err = a.Users(); err != nil {
			return nil, err
		}
		if a.Config.Presence.Policy == config.PresencePolicyOpen && !a.Config.Auth.DevSecrets {
			a.Log.Warn("presence.policy is open: every user sees everyone's presence; production usually wants contacts")
		}
	}
	m, err := presence.New(presence.Deps{
		Config:    a.Config.Presence,
		SendQueue: a.Config.Realtime.SendQueue,
		Redis:     rdb,
		Hub:       h,
		Keys:      a.Keys,
		Contacts:  contacts,
		Users:     users,
		Sockets:   a.Server.Sockets,
		Metrics:   a.Metrics,
		Log:       a.Log.With("module", "presence"),
	})
	if err != nil {
		return nil, err
	}
	return m, nil
}

// startChanges runs the webhook change writer once per process that
// changes statuses.
func startPresenceChanges(a *App, m *presence.Module) {
	if run, first := m.ChangeWriter(); first {
		a.Go("presence.changes", run)
	}
}

func startPresenceGateway(a *App) error {
	m, err := presenceModule(a)
	if err != nil {
		return err
	}
	run, err := m.Gateway(a.Routes(), a.Config.Realtime.SendQueue)
	if err != nil {
		return err
	}
	a.Go("presence.gateway", run)
	startPresenceChanges(a, m)
	return nil
}

func startPresenceRead(a *App) error {
	m, err := presenceModule(a)
	if err != nil {
		return err
	}
	return m.ReadAPI(a.Routes(), a.RequireAPIKey())
}

func startPresenceLifecycle(a *App) error {
	m, err := presenceModule(a)
	if err != nil {
		return err
	}
	a.Go("presence.lifecycle", m.Lifecycle())
	startPresenceChanges(a, m)
	return nil
}
