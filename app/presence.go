package app

import (
	"context"

	"github.com/presenced/presenced/config"
	"github.com/presenced/presenced/internal/module"
	"github.com/presenced/presenced/presence"
)

func presencePart(start func(*presence.Module, context.Context, module.Host) error) startFunc {
	return func(ctx context.Context, a *App, h module.Host) error {
		m, err := a.presence()
		if err != nil {
			return err
		}
		return start(m, ctx, h)
	}
}

func (a *App) presence() (*presence.Module, error) {
	return a.mods.presence.get(func() (*presence.Module, error) {
		if a.Config.Presence.Policy == config.PresencePolicyOpen && !a.Config.Auth.DevSecrets {
			a.Log.Warn("presence.policy is open: every user sees everyone's presence; production usually wants contacts")
		}
		return presence.New(presence.Deps{
			Config: a.Config.Presence, Keys: a.Keys,
			Metrics: a.Metrics, Log: a.Log.With("module", "presence"),
		})
	})
}
