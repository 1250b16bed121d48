package payments

import (
	"errors"
	"net/http"
	"slices"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/presenced/presenced/config"
	"github.com/presenced/presenced/web/wire"
)

// routes mounts the sandbox PSP's own endpoints: the confirm step a buyer's
// browser would do on the provider's page, and a dashboard of its ledger.
func (s *sandbox) routes(g *echo.Group, admin echo.MiddlewareFunc) {
	g.POST("/v1/sandbox/psp/intents/:id/confirm", s.postConfirm)
	g.GET("/v1/sandbox/psp/ledger", s.getLedger, admin)
}

func (s *sandbox) postConfirm(c echo.Context) error {
	var body SandboxConfirm
	c.Request().Body = http.MaxBytesReader(c.Response(), c.Request().Body, 4096)
	if err := wire.DecodeBody(c, &body); err != nil {
		return err
	}
	if !cleanToken(body.ClientSecret, 128) || len(body.Faults) > len(config.SandboxFaults) {
		return wire.BadRequest("clientSecret is required")
	}
	for _, f := range body.Faults {
		if slices.Contains(SandboxConfirmFaults, f) {
			continue
		}
		if slices.Contains(config.SandboxFaults, f) {
			return wire.BadRequest("fault %q acts when the intent is created: set it in payments.sandbox.faults", f)
		}
		return wire.BadRequest("unknown fault %q", f)
	}
	id := c.Param("id")
	if !cleanToken(id, 128) {
		// No intent has this id, and PostgreSQL would refuse the bytes.
		return wire.Errorf(http.StatusNotFound, CodeSandboxIntentNotFound, "no such intent")
	}
	in, err := s.confirm(c.Request().Context(), id, body.ClientSecret, body.Faults)
	if errors.Is(err, errNoIntent) {
		return wire.Errorf(http.StatusNotFound, CodeSandboxIntentNotFound, "no such intent")
	}
	if err != nil {
		return unavailable("confirm", err)
	}
	return c.JSON(http.StatusOK, SandboxIntentView{ID: in.ID, Amount: in.Amount, Currency: strings.ToUpper(in.Currency), Status: in.Status, Charged: in.ChargedAt})
}

func (s *sandbox) getLedger(c echo.Context) error {
	l, err := s.ledger(c.Request().Context(), "")
	if err != nil {
		return unavailable("ledger", err)
	}
	return c.JSON(http.StatusOK, l)
}
