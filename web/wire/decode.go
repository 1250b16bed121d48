package wire

import (
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/go-json-experiment/json"
	"github.com/labstack/echo/v4"
)

// MaxJSONDepth is how deeply a request body or frame may nest objects and
// arrays. presenced's own documents nest at most five levels; a provider's
// webhook body about ten.
const MaxJSONDepth = 32

// ErrTooDeep is a document nested deeper than MaxJSONDepth.
var ErrTooDeep = fmt.Errorf("nested deeper than %d levels", MaxJSONDepth)

// DecodeBody reads a request body as one JSON value into v, strictly (see
// StrictJSON). Read failures answer as ReadBody's; anything else refused
// answers 400 bad_request naming the reason.
func DecodeBody(c echo.Context, v any) error {
	data, err := ReadBody(c, 0)
	if err != nil {
		return err
	}
	if err := StrictJSON(data, v); err != nil {
		return BadRequest("the body is not valid JSON for this request: %v", err)
	}
	return nil
}

// ReadBody reads a request body whole, at most max bytes when max > 0
// (under http.body_limit_bytes in any case). Every handler that reads a
// body reads it here, so each answers the same: a body over the limit
// 413 body_too_large, one that did not arrive within
// http.body_read_timeout 408 request_timeout, any other read failure 400.
func ReadBody(c echo.Context, max int64) ([]byte, error) {
	body := c.Request().Body
	if max > 0 {
		body = io.NopCloser(io.LimitReader(body, max+1))
	}
	data, err := io.ReadAll(body)
	if err != nil {
		return nil, ReadError(err)
	}
	if max > 0 && int64(len(data)) > max {
		return nil, Errorf(http.StatusRequestEntityTooLarge, "body_too_large", "the body is larger than %d bytes", max)
	}
	return data, nil
}

// ReadError is the answer to a failed read of a request body: the limit's
// 413 and the deadline's 408 as they are, anything else 400.
func ReadError(err error) error {
	var tooBig *echo.HTTPError
	var apiErr *Error
	var maxBytes *http.MaxBytesError
	switch {
	case errors.As(err, &tooBig):
		return tooBig // http.body_limit_bytes cut the read short
	case errors.As(err, &apiErr):
		return apiErr // the body read deadline passed
	case errors.As(err, &maxBytes):
		return Errorf(http.StatusRequestEntityTooLarge, "body_too_large", "the body is larger than %d bytes", maxBytes.Limit)
	}
	return BadRequest("the body could not be read: %v", err)
}

// strict is what StrictJSON asks of the decoder beyond its defaults, which
// already refuse what a typo or a hostile client would slip through: field
// names match exactly ("Seats" is not "seats"), a name given twice, invalid
// UTF-8 and anything after the value are refused.
var strict = json.RejectUnknownMembers(true)

// StrictJSON decodes data, one JSON value, into v, refusing unknown and
// miscased fields, fields given twice, invalid UTF-8, trailing data and
// nesting deeper than MaxJSONDepth. Its cost is linear in len(data): the
// depth is checked before the decoder descends at all.
func StrictJSON(data []byte, v any) error {
	if err := CheckDepth(data, MaxJSONDepth); err != nil {
		return err
	}
	return json.Unmarshal(data, v, strict)
}

// LooseJSON decodes data into v as StrictJSON does but lets unknown fields
// pass: for documents from elsewhere (a provider's webhook, a peer) that
// may grow fields, and for reading what can be read of a refused frame.
func LooseJSON(data []byte, v any) error {
	if err := CheckDepth(data, MaxJSONDepth); err != nil {
		return err
	}
	return json.Unmarshal(data, v)
}

// CheckDepth refuses data whose objects and arrays nest deeper than limit,
// in one pass that allocates nothing. It only counts brackets outside
// strings: it does not validate, the decoder run after it does, and up to
// the first byte that decoder refuses both see the same nesting (the
// differential fuzz test FuzzCheckDepth holds it to that).
func CheckDepth(data []byte, limit int) error {
	depth := 0
	for i := 0; i < len(data); i++ {
		switch data[i] {
		case '"':
			i = stringEnd(data, i)
		case '[', '{':
			if depth++; depth > limit {
				return fmt.Errorf("%w (at byte %d)", ErrTooDeep, i)
			}
		case ']', '}':
			depth--
		}
	}
	return nil
}

// stringEnd returns the index of the quote closing the string that opens
// at data[i], or the last index when it never closes.
func stringEnd(data []byte, i int) int {
	for i++; i < len(data); i++ {
		switch data[i] {
		case '\\':
			i++
		case '"':
			return i
		}
	}
	return len(data) - 1
}
