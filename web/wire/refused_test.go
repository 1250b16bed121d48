package wire

import (
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/internal/refusal"
)

var (
	errGone   = errors.New("no such thing")
	errExists = errors.New("thing exists")
	errInner  = fmt.Errorf("inner thing exists: %w", errExists)
)

var testRefusals = []Refusal{
	{Kind: errGone, Status: http.StatusNotFound, Code: "gone"},
	{Kind: errInner, Status: http.StatusConflict, Code: "inner_exists"},
	{Kind: errExists, Status: http.StatusConflict, Code: "exists", Message: "a thing with this id exists"},
}

func answer(t *testing.T, err error) *Error {
	t.Helper()
	var e *Error
	require.ErrorAs(t, Refused(err, testRefusals), &e)
	return e
}

func TestRefusedMapsKindsWrappedWithContext(t *testing.T) {
	t.Parallel()
	e := answer(t, fmt.Errorf("load thing: %w", errGone))
	require.Equal(t, &Error{Status: http.StatusNotFound, Code: "gone", Message: "no such thing"}, e,
		"the kind's text, not the context's")

	e = answer(t, fmt.Errorf("save: %w", refusal.New(errGone, "no thing %q here", "x")))
	require.Equal(t, `no thing "x" here`, e.Message, "the refusal's own message")

	e = answer(t, errExists)
	require.Equal(t, "a thing with this id exists", e.Message, "the table's message before the kind's text")
	require.Equal(t, "exists", e.Code)

	e = answer(t, errInner)
	require.Equal(t, "inner_exists", e.Code, "first match first: the wrapping kind before the one it wraps")
}

func TestRefusedSharedKinds(t *testing.T) {
	t.Parallel()
	e := answer(t, refusal.Invalid("limit: 1 to %d", 5))
	require.Equal(t, &Error{Status: http.StatusBadRequest, Code: "bad_request", Message: "limit: 1 to 5"}, e)

	e = answer(t, fmt.Errorf("read: %w", refusal.Busy(2*time.Second, "store busy")))
	require.Equal(t, http.StatusServiceUnavailable, e.Status)
	require.Equal(t, "unavailable", e.Code)
	require.Equal(t, "store busy", e.Message)
	require.GreaterOrEqual(t, e.RetryAfter, time.Second, "jittered within [d/2, 3d/2)")
	require.Less(t, e.RetryAfter, 3*time.Second)

	e = answer(t, &refusal.Error{Kind: errGone, Msg: "gone for now", RetryAfter: 7 * time.Second})
	require.Equal(t, 7*time.Second, e.RetryAfter, "a kind's own retry-after, as given")
}

func TestRefusedLeavesTheRestAlone(t *testing.T) {
	t.Parallel()
	require.NoError(t, Refused(nil, testRefusals))
	other := errors.New("boom")
	require.Same(t, other, Refused(other, testRefusals), "an unexpected failure stays one (a 500)")
	made := Errorf(http.StatusRequestEntityTooLarge, "body_too_large", "too big")
	require.Same(t, made, Refused(made, testRefusals), "an answer already made")
	unmapped := refusal.New(errors.New("unmapped"), "x")
	require.Same(t, unmapped, Refused(unmapped, testRefusals), "a kind of no entry")
}
