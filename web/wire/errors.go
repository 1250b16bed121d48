package wire

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/presenced/presenced/internal/refusal"
	"github.com/presenced/presenced/store"
)

// Error is an API error: it becomes {"error":{"code","message"}} with
// Status, and a Retry-After header when RetryAfter is set.
type Error struct {
	Status     int
	Code       string
	Message    string
	RetryAfter time.Duration
	// Details are extra fields of the error object (e.g. the seats taken).
	Details map[string]any
}

func (e *Error) Error() string { return fmt.Sprintf("%d %s: %s", e.Status, e.Code, e.Message) }

// Errorf builds an API error.
func Errorf(status int, code, format string, args ...any) *Error {
	return &Error{Status: status, Code: code, Message: fmt.Sprintf(format, args...)}
}

// BadRequest is a 400 for input that cannot be accepted as sent.
func BadRequest(format string, args ...any) *Error {
	return Errorf(http.StatusBadRequest, "bad_request", format, args...)
}

// Unavailable is a retryable 503 with a jittered Retry-After around after,
// so clients told to come back do not return in one wave.
func Unavailable(after time.Duration, format string, args ...any) *Error {
	e := Errorf(http.StatusServiceUnavailable, "unavailable", format, args...)
	e.RetryAfter = Jitter(after)
	return e
}

// StoreRetryAfter is the base of the jittered Retry-After of a 503 for a
// store that was out of reach.
const StoreRetryAfter = time.Second

// Jitter returns a duration uniformly within [d/2, 3d/2).
func Jitter(d time.Duration) time.Duration { return refusal.Jitter(d) }

// codeForStatus names the errors echo itself raises (404, 405, 413, ...).
var codeForStatus = map[int]string{
	http.StatusBadRequest:            "bad_request",
	http.StatusUnauthorized:          "unauthorized",
	http.StatusForbidden:             "forbidden",
	http.StatusNotFound:              "not_found",
	http.StatusMethodNotAllowed:      "method_not_allowed",
	http.StatusConflict:              "conflict",
	http.StatusRequestEntityTooLarge: "body_too_large",
	http.StatusUnsupportedMediaType:  "unsupported_media_type",
	http.StatusUnprocessableEntity:   "unprocessable",
	http.StatusTooManyRequests:       "rate_limited",
	http.StatusServiceUnavailable:    "unavailable",
}

type errorBody struct {
	Error map[string]any `json:"error"`
}

// CodeForStatus is the error code of a status raised without one (echo's
// own 404, 405, 413, net/http's refusals); "" when none is named.
func CodeForStatus(status int) string { return codeForStatus[status] }

// Body is the error shape of e: {"error":{"code","message",...}}, its
// details included.
func (e *Error) Body() any {
	body := map[string]any{"code": e.Code, "message": e.Message}
	for k, v := range e.Details {
		body[k] = v
	}
	return errorBody{Error: body}
}

// ErrorHandler maps every error to the one JSON error shape. An error
// meaning a store was out of reach (store.Unavailable) is the retryable
// 503 with Retry-After, whichever module returned it. Unexpected errors
// are logged with the request id and answered without detail.
func ErrorHandler(log *slog.Logger) echo.HTTPErrorHandler {
	return func(err error, c echo.Context) {
		if c.Response().Committed {
			return
		}
		var apiErr *Error
		var httpErr *echo.HTTPError
		switch {
		case errors.As(err, &apiErr):
		case errors.As(err, &httpErr):
			apiErr = &Error{Status: httpErr.Code, Code: codeForStatus[httpErr.Code], Message: http.StatusText(httpErr.Code)}
			if msg, ok := httpErr.Message.(string); ok && msg != "" {
				apiErr.Message = msg
			}
			if apiErr.Code == "" {
				apiErr.Code = "error"
			}
		case store.Unavailable(err):
			// A store lost, refused, reset or timed out under the call,
			// whichever module made it: retryable, never a 500.
			log.Warn("request failed: a store is unavailable", "err", err, "method", c.Request().Method, "route", c.Path(),
				"request_id", c.Response().Header().Get(echo.HeaderXRequestID))
			apiErr = Unavailable(StoreRetryAfter, "a store is unavailable; retry")
		default:
			log.Error("request failed", "err", err, "method", c.Request().Method, "route", c.Path(),
				"request_id", c.Response().Header().Get(echo.HeaderXRequestID))
			apiErr = &Error{Status: http.StatusInternalServerError, Code: "internal", Message: "internal error"}
		}
		if apiErr.RetryAfter > 0 {
			secs := int((apiErr.RetryAfter + time.Second - 1) / time.Second)
			c.Response().Header().Set("Retry-After", strconv.Itoa(secs))
		}
		if c.Request().Method == http.MethodHead {
			err = c.NoContent(apiErr.Status)
		} else {
			err = c.JSON(apiErr.Status, apiErr.Body())
		}
		if err != nil {
			log.Debug("write error response", "err", err)
		}
	}
}
