package presence

import (
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/presenced/presenced/web/wire"
)

// privacyBody is the admin view and change of a user's privacy choices.
type privacyBody struct {
	User       string             `json:"user,omitempty"`
	Invisible  *bool              `json:"invisible,omitempty"`
	Visibility *VisibilityPayload `json:"visibility,omitempty"`
	// Status is the user's true status.
	Status *Status `json:"status,omitempty"`
}

// putPrivacy sets or clears invisible and changes who may see a user,
// online or not, with the API key: the same steps as the user's own.
func (a *readAPI) putPrivacy(c echo.Context) error {
	user := c.Param("user")
	if !validUserID(user) {
		return wire.BadRequest("%q is not a valid user id", truncate(user, 40))
	}
	var body privacyBody
	if err := wire.DecodeBody(c, &body); err != nil {
		return err
	}
	if body.Invisible == nil && body.Visibility == nil {
		return wire.BadRequest("invisible or visibility is required")
	}
	if body.Visibility != nil {
		if err := checkVisibility(*body.Visibility); err != nil {
			return wire.BadRequest("visibility: %s", err.Error())
		}
	}
	ctx := c.Request().Context()
	if body.Visibility != nil {
		if _, err := a.m.setVisibility(ctx, user, *body.Visibility, adminAudit(c, user)); err != nil {
			return a.unavailable(err)
		}
	}
	if body.Invisible != nil {
		op := "-"
		if *body.Invisible {
			op = "+"
		}
		res, err := a.m.st.step(ctx, user, "privacy", "", op)
		if err != nil {
			return a.unavailable(err)
		}
		a.m.changed(ctx, res)
		a.m.audit.auditStep(adminAudit(c, user), res, "", op)
		if res.Sessions > 0 {
			own := res.Own.public()
			a.m.tellSelf(ctx, user, "", &own, nil)
		}
	}
	return a.privacy(c, user)
}

// getPrivacy reads a user's privacy choices and true status.
func (a *readAPI) getPrivacy(c echo.Context) error {
	user := c.Param("user")
	if !validUserID(user) {
		return wire.BadRequest("%q is not a valid user id", truncate(user, 40))
	}
	return a.privacy(c, user)
}

func (a *readAPI) privacy(c echo.Context, user string) error {
	ctx := c.Request().Context()
	sts, err := a.m.st.trueStatuses(ctx, []string{user})
	if err != nil {
		return a.unavailable(err)
	}
	vis, err := a.m.st.visibilities(ctx, []string{user})
	if err != nil {
		return a.unavailable(err)
	}
	own := sts[0].public()
	v := vis[0].orEveryone().payload()
	return c.JSON(http.StatusOK, privacyBody{User: user, Invisible: &own.Invisible, Visibility: &v, Status: &own})
}
