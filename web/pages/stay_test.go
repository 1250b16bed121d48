package pages_test

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/app/apptest"
)

// A stay booked from the hotel's page alone, as a person would: opened
// without dates (titled with the hotel's name, not its id), dates, guests
// and rooms, a room type with its price per night, a hold with its
// countdown, the sandbox's checkout, and one voucher per room with a
// rotating code. Once at desktop width, once at a phone's.
func TestBrowserHotelStayFromDatesToVoucher(t *testing.T) {
	ctx := browser(t)
	s := server(t)
	suffix := strconv.FormatInt(time.Now().UnixNano(), 36)
	hotel := "bt-stay-" + suffix
	createHotel(t, s, hotel, "stayville-"+suffix, "Seaside Test Hotel")

	desk := tab(t, ctx, "hotel-stay", true)
	bookStay(t, s, desk, hotel, "desk", 2, "hotel-stay")

	mobile := tab(t, ctx, "hotel-stay-phone", true)
	phone(t, mobile)
	bookStay(t, s, mobile, hotel, "phone", 1, "hotel-stay-phone")
}

// bookStay walks one booking of rooms double rooms on page, writing the
// screenshots shots-hold and shots-vouchers (the hold and the vouchers).
func bookStay(t *testing.T, s *apptest.Server, page context.Context, hotel, who string, rooms int, shots string) {
	t.Helper()
	run(t, page, chromedp.Navigate(s.URL+"/demo/hotels/"+hotel))
	require.Equal(t, "Seaside Test Hotel", textOf(t, page, "hotel-name"), "titled with the name, not the id")
	require.Equal(t, "Seaside Test Hotel · presenced", evalJS[string](t, page, `document.title`))
	waitJS(t, page, "the page counts itself", `Number(document.getElementById('viewer-count').dataset.count) >= 1`)

	// Dates a week out, guests and rooms; the room types with their price
	// per night (12,000 a night for a double in createHotel).
	in := time.Now().AddDate(0, 0, 7).Format("2006-01-02")
	out := time.Now().AddDate(0, 0, 9).Format("2006-01-02")
	run(t, page,
		chromedp.SetValue(chromedp.ID("check-in"), in),
		chromedp.SetValue(chromedp.ID("check-out"), out),
		chromedp.SetValue(chromedp.ID("guests"), strconv.Itoa(2*rooms)),
		chromedp.SetValue(chromedp.ID("rooms-wanted"), strconv.Itoa(rooms)),
		chromedp.SetValue(chromedp.ID("guest"), who+"-guest"),
		chromedp.Click(chromedp.ID("search")),
	)
	double := `document.querySelector('#rooms li[data-room-type="double"]')`
	waitJS(t, page, "the double room with its price", `document.getElementById('rooms').dataset.state === 'ready' && `+double+`?.querySelector('.price')?.textContent.includes('a night') && document.getElementById('rooms-status').textContent.includes('`+in+`')`)
	require.Contains(t, evalJS[string](t, page, double+`.textContent`), "120.00", "12,000 cents a night")
	accessible(t, page)

	// Hold: a countdown and the price of each night.
	run(t, page, chromedp.Click(chromedp.CSS(`#rooms li[data-room-type="double"] button.hold`)))
	waitJS(t, page, "the hold and its countdown", `!document.getElementById('step-hold').classList.contains('hidden') && Number(document.getElementById('countdown').dataset.seconds) > 60`)
	require.Equal(t, 2, evalJS[int](t, page, `document.querySelectorAll('#hold-nights li').length`), "two nights, each priced")
	require.Contains(t, textOf(t, page, "hold-summary"), fmt.Sprintf("Double, %d room", rooms))
	require.Contains(t, textOf(t, page, "hold-summary"), fmt.Sprintf("%d.00", 2*120*rooms), "the total")
	first := evalJS[int](t, page, `Number(document.getElementById('countdown').dataset.seconds)`)
	waitJS(t, page, "the countdown runs", fmt.Sprintf(`Number(document.getElementById('countdown').dataset.seconds) < %d`, first))
	require.Empty(t, textOf(t, page, "hotel-message"))
	accessible(t, page)
	shot(t, page, shots+"-hold")

	// Pay on the sandbox's checkout page, back to one voucher per room.
	run(t, page, chromedp.Click(chromedp.ID("pay")))
	waitJS(t, page, "the checkout page", `location.pathname === '/demo/checkout' && !document.getElementById('confirm').disabled`)
	run(t, page, chromedp.Click(chromedp.ID("confirm")))
	waitJS(t, page, "a voucher per room, with its code", fmt.Sprintf(`location.pathname === '/demo/hotels/%s' && document.querySelectorAll('#vouchers li[data-window]').length === %d`, hotel, rooms))
	require.Equal(t, "PAID", evalJS[string](t, page, `document.getElementById('step-hold').dataset.status`))
	require.Contains(t, textOf(t, page, "vouchers"), "Seaside Test Hotel, Double, "+in+" to "+out+" (2 nights), room 1 of "+strconv.Itoa(rooms))
	require.True(t, evalJS[bool](t, page, `[...document.querySelectorAll('#vouchers img')].every((i) => i.complete && i.naturalWidth > 0)`), "QR images load")
	accessible(t, page)
	shot(t, page, shots+"-vouchers")
}
