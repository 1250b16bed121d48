package payments_test

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/internal/testenv"
	"github.com/presenced/presenced/payments"
	"github.com/presenced/presenced/payments/ticketcode"
)

// The whole path through the sandbox: a start answers the client secret
// (and the same answer for the same key), the confirm step charges, the
// signed webhook sells, fulfillment issues one ticket per seat and one
// notification, and the QR endpoint serves a code the gate verifies.
func TestPaymentEndToEnd(t *testing.T) {
	t.Parallel()
	s := startSale(t, 10, nil)
	b, res := s.hold(2)

	status, _, body := s.pay(b, res, "")
	require.Equal(t, 400, status, body)
	require.Contains(t, body, payments.CodeIdempotencyRequired)
	other := s.admit(s.event + "-stranger")
	status, _, _ = s.pay(other, res, "k")
	require.Equal(t, 404, status, "someone else's reservation")

	status, v, body := s.pay(b, res, "pay-1")
	require.Equal(t, 201, status, body)
	require.Equal(t, payments.StatusPending, v.Status)
	require.Equal(t, "sandbox", v.Provider)
	require.Equal(t, int64(3000), v.Amount)
	require.NotEmpty(t, v.ClientSecret)
	status, again, _ := s.pay(b, res, "pay-1")
	require.Equal(t, 201, status)
	require.Equal(t, v, again, "the same key answers the same payment")
	status, other2, _ := s.pay(b, res, "pay-2")
	require.Equal(t, 201, status)
	require.Equal(t, v.ID, other2.ID, "a reservation has one live payment, whatever the key")

	s.confirm(v)
	s.waitFulfilled(res, 2)
	require.Equal(t, "PAID", s.reservationStatus(res))
	require.Equal(t, payments.StatusSucceeded, s.paymentStatus(v.ID))
	require.EqualValues(t, 1, s.charges(res))
	status, _, body = s.pay(b, res, "pay-3")
	require.Equal(t, 409, status, body)
	require.Contains(t, body, payments.CodeReservationPaid)

	status, body = s.do(http.MethodGet, "/v1/tickets", map[string]string{"Authorization": "Bearer " + b.token}, nil)
	require.Equal(t, 200, status, body)
	var list payments.TicketList
	require.NoError(t, json.Unmarshal([]byte(body), &list))
	require.Len(t, list.Tickets, 2)
	require.Equal(t, "Section A, row 1, seat 1", list.Tickets[0].Label)

	status, body = s.do(http.MethodGet, "/v1/tickets/"+list.Tickets[0].ID+"/qr", map[string]string{"Authorization": "Bearer " + b.token}, nil)
	require.Equal(t, 200, status, body)
	var qr payments.QRView
	require.NoError(t, json.Unmarshal([]byte(body), &qr))
	id, w, _, err := ticketcode.ParsePayload(qr.Payload)
	require.NoError(t, err)
	require.Equal(t, list.Tickets[0].ID, id)
	require.InDelta(t, ticketcode.Window(time.Now()), w, 1)
	status, png := s.do(http.MethodGet, "/v1/tickets/"+list.Tickets[0].ID+"/qr?format=png", map[string]string{"Authorization": "Bearer " + b.token}, nil)
	require.Equal(t, 200, status)
	require.Equal(t, "\x89PNG", png[:4])
	status, _ = s.do(http.MethodGet, "/v1/tickets/"+list.Tickets[0].ID+"/qr", map[string]string{"Authorization": "Bearer " + other.token}, nil)
	require.Equal(t, 404, status, "another user's ticket")
	s.requireSeatsConsistent()
}

// Bad input to a start changes nothing and says why.
func TestPaymentStartRefusals(t *testing.T) {
	t.Parallel()
	s := startSale(t, 10, nil)
	b, res := s.hold(1)
	hdr := map[string]string{"Authorization": "Bearer " + b.token, payments.HeaderIdempotencyKey: "k k"}
	status, body := s.do(http.MethodPost, "/v1/reservations/"+res+"/payments", hdr, nil)
	require.Equal(t, 400, status, body)
	require.Contains(t, body, payments.CodeBadIdempotencyKey)
	hdr[payments.HeaderIdempotencyKey] = "k"
	status, body = s.do(http.MethodPost, "/v1/reservations/"+res+"/payments", hdr, map[string]int{"amount": 1})
	require.Equal(t, 400, status, body)
	status, _ = s.do(http.MethodPost, "/v1/reservations/not-a-uuid/payments", hdr, nil)
	require.Equal(t, 404, status)
	status, _ = s.do(http.MethodPost, "/v1/reservations/"+res+"/payments", map[string]string{payments.HeaderIdempotencyKey: "k"}, nil)
	require.Equal(t, 401, status)
	require.Zero(t, s.scalar(`SELECT count(*) FROM payments WHERE reservation_id = $1`, res), "nothing stored")

	// The same key for another reservation is a conflict.
	status, _, body = s.pay(b, res, "shared")
	require.Equal(t, 201, status, body)
	_, res2 := s.hold(1)
	status, _, body = s.pay(b, res2, "shared")
	require.Equal(t, 422, status, body)
	require.Contains(t, body, payments.CodeIdempotencyKeyReused)

	// Cancelled and expired reservations cannot be paid.
	c, cancelled := s.hold(1)
	status, body = s.do(http.MethodDelete, "/v1/reservations/"+cancelled, map[string]string{"Authorization": "Bearer " + c.token}, nil)
	require.Equal(t, 200, status, body)
	status, _, body = s.pay(c, cancelled, "k1")
	require.Equal(t, 409, status, body)
	require.Contains(t, body, payments.CodeReservationCancelled)
	e, expired := s.hold(1)
	_, err := s.db.Exec(t.Context(), `UPDATE reservations SET expires_at = now() - interval '1 second' WHERE id = $1`, expired)
	require.NoError(t, err)
	status, _, body = s.pay(e, expired, "k1")
	require.Equal(t, 409, status, body)
	require.Contains(t, body, payments.CodeReservationExpired)
	testenv.Eventually(t, 10*time.Second, func() bool { return s.reservationStatus(expired) == "EXPIRED" }, "expired by the worker")
}
