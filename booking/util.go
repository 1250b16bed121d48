package booking

import (
	"strconv"

	"github.com/presenced/presenced/internal/validate"
)

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// The identifier rules are the shared ones of internal/validate; the
// migration's CHECK constraints say the same.
var (
	sectionIDPattern = validate.SectionID
	promoPattern     = validate.PromoCode
)

// validEventID tells whether id can name an event (and a Redis hash tag).
func validEventID(id string) bool { return validate.EventID.Valid(id) }
