package presence

import (
	"net/http"
	"strconv"

	"github.com/labstack/echo/v4"

	"github.com/presenced/presenced/web/wire"
)

// maxAuditPage bounds one page of GET /v1/presence/audit/{user}.
const maxAuditPage = 500

// getAudit answers a user's audit records, newest first, a page at a time:
// ?limit= (1-500, 100 by default), ?before= the next of the last page.
func (a *readAPI) getAudit(c echo.Context) error {
	user := c.Param("user")
	if !validUserID(user) {
		return wire.BadRequest("%q is not a valid user id", truncate(user, 40))
	}
	limit := 100
	if s := c.QueryParam("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > maxAuditPage {
			return wire.BadRequest("limit must be between 1 and %d", maxAuditPage)
		}
		limit = n
	}
	var before int64
	if s := c.QueryParam("before"); s != "" {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n < 1 {
			return wire.BadRequest("before must be the next of a previous page")
		}
		before = n
	}
	recs, err := a.m.audit.page(c.Request().Context(), user, before, limit)
	if err != nil {
		return a.unavailable(err)
	}
	page := AuditPage{User: user, Records: recs}
	if len(recs) == limit {
		page.Next = strconv.FormatInt(recs[len(recs)-1].ID, 10)
	}
	return c.JSON(http.StatusOK, page)
}

// adminAudit is the audit record of a change made through the server API.
func adminAudit(c echo.Context, user string) AuditRecord {
	return AuditRecord{User: user, Actor: actorAdmin, RequestID: c.Response().Header().Get(echo.HeaderXRequestID)}
}
