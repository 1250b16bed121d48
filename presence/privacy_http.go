package presence

import (
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/presenced/presenced/web/wire"
)

// privacyBody is the admin view and change of a user's privacy choices.
type privacyBody struct {
	User      string `json:"user,omitempty"`
	Invisible *bool  `json:"invisible"`
	// Status is the user's true status after the change.
	Status *Status `json:"status,omitempty"`
}

// putPrivacy sets or clears invisible for a user, online or not, with the
// API key: one session step, as the user's own change would be.
func (a *readAPI) putPrivacy(c echo.Context) error {
	user := c.Param("user")
	if !validUserID(user) {
		return wire.BadRequest("%q is not a valid user id", truncate(user, 40))
	}
	var body privacyBody
	if err := wire.DecodeBody(c, &body); err != nil {
		return err
	}
	if body.Invisible == nil {
		return wire.BadRequest("invisible is required")
	}
	op := "-"
	if *body.Invisible {
		op = "+"
	}
	ctx := c.Request().Context()
	res, err := a.m.st.step(ctx, user, "privacy", "", op)
	if err != nil {
		return a.unavailable(err)
	}
	a.m.changed(ctx, res)
	own := res.Own.public()
	return c.JSON(http.StatusOK, privacyBody{User: user, Invisible: &own.Invisible, Status: &own})
}

// getPrivacy reads a user's privacy choices and true status.
func (a *readAPI) getPrivacy(c echo.Context) error {
	user := c.Param("user")
	if !validUserID(user) {
		return wire.BadRequest("%q is not a valid user id", truncate(user, 40))
	}
	sts, err := a.m.st.trueStatuses(c.Request().Context(), []string{user})
	if err != nil {
		return a.unavailable(err)
	}
	own := sts[0].public()
	return c.JSON(http.StatusOK, privacyBody{User: user, Invisible: &own.Invisible, Status: &own})
}
