package gate

import (
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/presenced/presenced/web/wire"
)

// Routes mounts POST /v1/gate/scan and GET /healthz.
func (g *Gate) Routes(e *echo.Echo) {
	e.POST("/v1/gate/scan", g.postScan)
	e.GET("/healthz", func(c echo.Context) error { return c.JSON(http.StatusOK, map[string]string{"status": "ok"}) })
}

func (g *Gate) postScan(c echo.Context) error {
	var req ScanRequest
	c.Request().Body = http.MaxBytesReader(c.Response(), c.Request().Body, 1024)
	if err := wire.DecodeBody(c, &req); err != nil || req.Payload == "" {
		return wire.BadRequest(`want {"payload":"<ticket code>"}`)
	}
	ans, err := g.Scan(c.Request().Context(), req.Payload)
	if err != nil {
		return wire.Refused(err, refusals)
	}
	return c.JSON(http.StatusOK, ans)
}

// refusals are the HTTP answers to a scan's refusals.
var refusals = []wire.Refusal{
	{Kind: ErrInvalidCode, Status: http.StatusUnprocessableEntity, Code: CodeInvalidCode},
	{Kind: ErrAlreadyUsed, Status: http.StatusConflict, Code: CodeAlreadyUsed},
	{Kind: ErrLedgerUnavailable, Status: http.StatusServiceUnavailable, Code: "ledger_unavailable"},
}
