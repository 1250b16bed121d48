package presence

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/presenced/presenced/internal/auth"
	"github.com/presenced/presenced/web/wire"
)

// maxContacts bounds one contact list.
const maxContacts = 10000

type readAPI struct{ m *Module }

func (a *readAPI) user(c echo.Context) error {
	id := c.Param("id")
	if !validUserID(id) {
		return wire.BadRequest("%q is not a valid user id", truncate(id, 40))
	}
	claims := auth.FromContext(c.Request().Context())
	ctx := c.Request().Context()
	forbidden, err := a.m.policy.Forbidden(ctx, viewer{User: claims.Subject, Rooms: claims.Rooms}, []string{id})
	if err != nil {
		return a.unavailable(err)
	}
	if len(forbidden) > 0 {
		return wire.Errorf(http.StatusForbidden, "forbidden", "not visible to you: not a contact and no shared room")
	}
	read := a.m.st.statuses
	if id == claims.Subject {
		// A user sees themself as they are, invisible or not.
		read = a.m.st.trueStatuses
	}
	sts, err := read(ctx, []string{id})
	if err != nil {
		return a.unavailable(err)
	}
	st := sts[0].public()
	if id != claims.Subject {
		hidden, err := a.m.hidesLastActive(ctx, claims.Subject, []string{id})
		if err != nil {
			return a.unavailable(err)
		}
		if len(hidden) > 0 {
			st.LastActiveAt = 0
		}
	}
	return c.JSON(http.StatusOK, st)
}

type queryBody struct {
	Users []string `json:"users"`
	// IncludeInvisible asks for invisible users' true statuses (marked
	// "invisible": true) instead of the offline their followers see.
	IncludeInvisible bool `json:"includeInvisible"`
}

func (a *readAPI) query(c echo.Context) error {
	var body queryBody
	if err := wire.DecodeBody(c, &body); err != nil {
		return err
	}
	if len(body.Users) == 0 {
		return wire.BadRequest("users is required")
	}
	if len(body.Users) > a.m.cfg.MaxQueryUsers {
		return wire.Errorf(http.StatusUnprocessableEntity, "too_many_users", "at most %d users per query", a.m.cfg.MaxQueryUsers)
	}
	ids, bad, ok := cleanIDs(body.Users)
	if !ok {
		return wire.BadRequest("%q is not a valid user id", truncate(bad, 40))
	}
	read := a.m.st.statuses
	if body.IncludeInvisible {
		read = a.m.st.trueStatuses
	}
	sts, err := read(c.Request().Context(), ids)
	if err != nil {
		return a.unavailable(err)
	}
	out := make([]Status, len(sts))
	for i, st := range sts {
		out[i] = st.public()
	}
	return c.JSON(http.StatusOK, UpdatedPayload{Users: out})
}

type contactsBody struct {
	User     string   `json:"user,omitempty"`
	Contacts []string `json:"contacts"`
}

func (a *readAPI) putContacts(c echo.Context) error {
	owner := c.Param("user")
	if !validUserID(owner) {
		return wire.BadRequest("%q is not a valid user id", truncate(owner, 40))
	}
	var body contactsBody
	if err := wire.DecodeBody(c, &body); err != nil {
		return err
	}
	if body.Contacts == nil {
		return wire.BadRequest("contacts is required (an empty list clears it)")
	}
	if len(body.Contacts) > maxContacts {
		return wire.Errorf(http.StatusUnprocessableEntity, "too_many_contacts", "at most %d contacts", maxContacts)
	}
	ids, bad, ok := cleanIDs(body.Contacts)
	if !ok {
		return wire.BadRequest("%q is not a valid user id", truncate(bad, 40))
	}
	for _, id := range ids {
		if id == owner {
			return wire.BadRequest("a user is not their own contact")
		}
	}
	ctx := c.Request().Context()
	if err := a.m.contacts.Replace(ctx, owner, ids); err != nil {
		return a.unavailable(err)
	}
	// Connections of the owner drop the subscriptions no longer allowed.
	if err := a.m.sendControl(ctx, controlMsg{T: "contacts", U: owner}); err != nil {
		a.m.log.Warn("presence: announce contact change", "err", err)
	}
	// An owner showing themself to their contacts only: who follows them
	// is checked again too.
	if vis, err := a.m.st.visibilities(ctx, []string{owner}); err == nil &&
		(vis[0].Status == VisibleContacts || vis[0].LastActive == VisibleContacts) {
		a.m.recheckFollowers(owner)
	}
	list, err := a.m.contacts.List(ctx, owner)
	if err != nil {
		return a.unavailable(err)
	}
	return c.JSON(http.StatusOK, contactsBody{User: owner, Contacts: list})
}

func (a *readAPI) getContacts(c echo.Context) error {
	owner := c.Param("user")
	if !validUserID(owner) {
		return wire.BadRequest("%q is not a valid user id", truncate(owner, 40))
	}
	list, err := a.m.contacts.List(c.Request().Context(), owner)
	if err != nil {
		return a.unavailable(err)
	}
	return c.JSON(http.StatusOK, contactsBody{User: owner, Contacts: list})
}

func (a *readAPI) unavailable(err error) error {
	if errors.Is(err, context.Canceled) {
		return err
	}
	a.m.log.Warn("presence: read API", "err", err)
	return wire.Unavailable(time.Second, "presence store unavailable")
}
