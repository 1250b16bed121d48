package pages

import (
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/presenced/presenced/internal/auth"
	"github.com/presenced/presenced/web/wire"
)

// TokenRequest is the body of POST /demo/token.
type TokenRequest struct {
	User string `json:"user"`
}

// TokenAnswer is a development user token for the demo pages.
type TokenAnswer struct {
	User      string    `json:"user"`
	Token     string    `json:"token"`
	ExpiresAt time.Time `json:"expiresAt"`
}

// signIn answers POST /demo/token: a development token for any user id,
// exactly what `presenced token --user` prints. The app mounts it only on
// a development server (see app/web.go), never beside a real issuer.
func signIn(mint func(string) (string, time.Time, error)) echo.HandlerFunc {
	return func(c echo.Context) error {
		var req TokenRequest
		c.Request().Body = http.MaxBytesReader(c.Response(), c.Request().Body, 1024)
		if err := wire.DecodeBody(c, &req); err != nil {
			return err
		}
		if err := auth.ValidUserID(req.User); err != nil {
			return wire.BadRequest("user: %v", err)
		}
		tok, exp, err := mint(req.User)
		if err != nil {
			return err
		}
		c.Response().Header().Set(echo.HeaderCacheControl, "no-store")
		return c.JSON(http.StatusOK, TokenAnswer{User: req.User, Token: tok, ExpiresAt: exp.UTC()})
	}
}
