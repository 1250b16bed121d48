package waitingroom

import (
	"context"
	"fmt"
	"time"

	"github.com/presenced/presenced/internal/admission"
)

// The module's in-process API: what the app and other modules may call.
// Everything else in the package is the module's own. The pass and lease
// rules themselves are internal/admission's, shared with booking.

// Verify returns nil only when pass is a valid pass of user for event and
// user holds a live checkout lease. Errors wrap ErrNotAdmitted or
// ErrUnavailable; the caller must fail closed on both.
func (m *Module) Verify(ctx context.Context, pass, event, user string) error {
	v, err := m.started()
	if err != nil {
		return err
	}
	return v.Verify(ctx, pass, event, user)
}

// Extend keeps user's lease for event alive for d from now.
func (m *Module) Extend(ctx context.Context, event, user string, d time.Duration) error {
	v, err := m.started()
	if err != nil {
		return err
	}
	return v.Extend(ctx, event, user, d)
}

// Release ends user's lease for event (checkout finished or abandoned).
func (m *Module) Release(ctx context.Context, event, user string) error {
	v, err := m.started()
	if err != nil {
		return err
	}
	return v.Release(ctx, event, user)
}

// CheckPass checks a pass itself (its EdDSA signature, expiry, user and
// event) but not its lease: for a caller that checks the lease in a script
// of its own (admission.LeaseLua). Errors wrap ErrNotAdmitted or
// ErrUnavailable.
func (m *Module) CheckPass(pass, event, user string) error {
	v, err := m.started()
	if err != nil {
		return err
	}
	return v.Check(pass, event, user)
}

func (m *Module) started() (*admission.Verifier, error) {
	if m.verifier == nil {
		return nil, fmt.Errorf("%w: the verify part is not started in this process", ErrUnavailable)
	}
	return m.verifier, nil
}
