package pages_test

import (
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"
)

// On a phone: the sale page opens on the sections (price and free seats),
// draws seats only for the section chosen, each at least 24 CSS px with the
// section scrolling inside its frame (never the page), and "best 2" holds
// two seats side by side in one tap; then pay and tickets. The live
// overview follows the hold.
func TestBrowserSaleBestAvailableOnAPhone(t *testing.T) {
	ctx := browser(t)
	s := server(t)
	event := "bt-best-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	now := time.Now().UTC()
	admin(t, s, http.MethodPost, "/v1/admin/events", map[string]any{
		"id": event, "name": "Browser Test Arena", "currency": "EUR",
		"startsAt": now.Add(30 * 24 * time.Hour).Format(time.RFC3339), "saleOpensAt": now.Add(-time.Minute).Format(time.RFC3339),
		"holdMinutes": 10,
		"sections": []map[string]any{
			{"id": "A", "name": "Floor", "rows": 4, "seatsPerRow": 8, "basePrice": 9000},
			{"id": "B", "name": "Balcony", "rows": 20, "seatsPerRow": 40, "basePrice": 4500},
		},
	}, http.StatusCreated)
	admin(t, s, http.MethodPut, "/v1/admin/waitingrooms/"+event, map[string]any{"capacity": 5, "batch": 5}, http.StatusCreated)

	fan := tab(t, ctx, "sale-best", true)
	phone(t, fan)
	run(t, fan, chromedp.Navigate(s.URL+"/demo/sale/"+event))
	waitJS(t, fan, "the sections overview", `document.querySelectorAll('#sections button').length === 2 && document.querySelector('#sections [data-section=B]').dataset.free === '800'`)
	require.Contains(t, textOf(t, fan, "sections"), "Balcony")
	require.Contains(t, textOf(t, fan, "sections"), "€45.00")
	// Every step is numbered in order on the page, the line's before one
	// has joined it (it used to go from 1 to 3).
	require.False(t, evalJS[bool](t, fan, `document.getElementById('step-line').classList.contains('hidden')`), "step 2 shown before joining")
	require.Contains(t, textOf(t, fan, "position"), "Not in the line yet")
	run(t, fan,
		chromedp.SetValue(chromedp.ID("fan"), "fan-best"),
		chromedp.Click(chromedp.ID("join")),
	)
	waitJS(t, fan, "admitted", `document.body.dataset.admitted === 'true'`)
	run(t, fan, chromedp.Click(chromedp.CSS(`#sections [data-section=B]`)))
	waitJS(t, fan, "the balcony drawn", `document.getElementById('seatmap').dataset.section === 'B' && document.getElementById('seatmap').dataset.free === '800'`)
	require.GreaterOrEqual(t, evalJS[int](t, fan, `Number(document.getElementById('seatmap').dataset.cell)`), 24, "seats sized for a finger")
	require.True(t, evalJS[bool](t, fan, `document.getElementById('seatmap-wrap').scrollWidth > document.getElementById('seatmap-wrap').clientWidth`),
		"a 40-seat row scrolls inside the section's frame")
	require.LessOrEqual(t, evalJS[int](t, fan, `document.documentElement.scrollWidth`), 390, "the page itself does not scroll sideways")
	accessible(t, fan)
	shot(t, fan, "sale-sections-phone")

	// A seat picked by finger gets no focus ring; the keyboard's does.
	// The frame opens on the row's middle: a seat of row 1 in its view.
	run(t, fan, chromedp.ScrollIntoView(chromedp.ID("seatmap-wrap")))
	x := evalJS[float64](t, fan, `(() => { const w = document.getElementById('seatmap-wrap').getBoundingClientRect(); return w.left + w.width / 2; })()`)
	y := evalJS[float64](t, fan, `(() => { const c = document.getElementById('seatmap'); return c.getBoundingClientRect().top + Number(c.dataset.pad) + Number(c.dataset.cell) / 2; })()`)
	run(t, fan, chromedp.MouseClickXY(x, y))
	waitJS(t, fan, "a seat picked by touch", `document.getElementById('picked').textContent !== 'none'`)
	require.Equal(t, "off", evalJS[string](t, fan, `document.getElementById('seatmap').dataset.ring`), "no ring on a seat picked by touch")
	run(t, fan, chromedp.KeyEvent(" "))
	waitJS(t, fan, "the seat put back by the keyboard", `document.getElementById('picked').textContent === 'none'`)
	require.Equal(t, "on", evalJS[string](t, fan, `document.getElementById('seatmap').dataset.ring`), "the keyboard's ring")

	waitJS(t, fan, "best 2 offered", `!document.getElementById('hold-best').disabled && document.getElementById('hold-best').textContent === 'Best 2 together in Balcony'`)
	run(t, fan, chromedp.Click(chromedp.ID("hold-best")))
	waitJS(t, fan, "the hold", `!document.getElementById('step-hold').classList.contains('hidden') && Number(document.getElementById('countdown').dataset.seconds) > 500`)
	// The best two of the balcony: row 1, the middle of the row (21-22:
	// twenty seats left of them, eighteen right, pairs fill both).
	require.Contains(t, textOf(t, fan, "hold-summary"), "B-1-21")
	require.Contains(t, textOf(t, fan, "hold-summary"), "B-1-22")
	waitJS(t, fan, "the live overview follows the hold", `document.querySelector('#sections [data-section=B]').dataset.free === '798'`)
	waitJS(t, fan, "the live map too", `document.getElementById('seatmap').dataset.free === '798'`)
	shot(t, fan, "sale-best-phone")

	run(t, fan, chromedp.Click(chromedp.ID("pay")))
	waitJS(t, fan, "the checkout page", `location.pathname === '/demo/checkout' && !document.getElementById('confirm').disabled`)
	run(t, fan, chromedp.Click(chromedp.ID("confirm")))
	waitJS(t, fan, "two tickets", `location.pathname === '/demo/sale/`+event+`' && document.querySelectorAll('#tickets li[data-window]').length === 2`)
	desktop(t, fan)
	waitJS(t, fan, "at desktop width a section still shows every seat at touch size",
		`Number(document.getElementById('seatmap').dataset.cell) >= 24`)
}
