package booking_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/presenced/presenced/booking"
	"github.com/presenced/presenced/config"
	"github.com/presenced/presenced/internal/module/moduletest"
	"github.com/presenced/presenced/internal/testenv"
	"github.com/presenced/presenced/store"
)

// Events are created through the admin part, which needs only the main
// PostgreSQL pool; an id is taken once.
func ExampleModule_CreateEvent() {
	env := testenv.Example("ExampleModule_CreateEvent")
	defer env.Close()
	ctx := context.Background()
	m := newExampleModule()
	host := moduletest.New(env, nil, moduletest.Stores{Postgres: testenv.Postgres(env)})
	if err := m.StartAdmin(ctx, host); err != nil {
		panic(err)
	}

	sections, _ := booking.ParseSections("A:2x10@4500,B:3x10@3000")
	spec := booking.EventSpec{ID: "example-final", Name: "Cup Final", Currency: "EUR",
		StartsAt: time.Now().Add(30 * 24 * time.Hour), Sections: sections}
	sum, err := m.CreateEvent(ctx, spec)
	fmt.Println(sum.ID, sum.Sections, "sections,", sum.Seats, "seats", err)
	err = m.CreatePromotion(ctx, "example-final", booking.PromotionSpec{Code: "EARLYBIRD", DiscountBps: 2000, MaxUses: 500})
	fmt.Println("promotion:", err)
	_, err = m.CreateEvent(ctx, spec)
	fmt.Println("again:", errors.Is(err, booking.ErrEventExists))
	// Output:
	// example-final 2 sections, 50 seats <nil>
	// promotion: <nil>
	// again: true
}

// A hotel is created with its room types, and its nights open for sale.
func ExampleModule_CreateHotel() {
	env := testenv.Example("ExampleModule_CreateHotel")
	defer env.Close()
	ctx := context.Background()
	m := newExampleModule()
	host := moduletest.New(env, nil, moduletest.Stores{Postgres: testenv.Postgres(env)})
	if err := m.StartAdmin(ctx, host); err != nil {
		panic(err)
	}

	rooms, _ := booking.ParseRoomTypes("std:30x2@9000,suite:5x4@25000")
	sum, err := m.CreateHotel(ctx, booking.HotelSpec{ID: "example-grand", City: "lisbon",
		Timezone: "Europe/Lisbon", Currency: "EUR", OpenNights: 30, RoomTypes: rooms})
	fmt.Println(sum.ID, sum.RoomTypes, "room types", err)
	// Output:
	// example-grand 2 room types <nil>
}

// What a ticket admits to is booking's to say: the event of a seat
// checkout, the hotel of a stay, never confused with an event of its name.
func ExampleCheckout_Admits() {
	seats := booking.Checkout{Kind: booking.KindSeats, Event: "final-2027"}
	stay := booking.Checkout{Kind: booking.KindStay, Hotel: "final-2027"}
	fmt.Println(seats.Admits())
	fmt.Println(stay.Admits())
	// Output:
	// final-2027
	// hotel:final-2027
}

// newExampleModule builds booking with the ports the app gives it in a
// process; administration asks neither.
func newExampleModule() *booking.Module {
	m, err := booking.New(booking.Deps{
		Config: config.Default().Booking, Keys: store.NewKeyspace("example:"),
		Admission: noAdmission{}, Viewers: noViewers{},
		Metrics: prometheus.NewRegistry(), Log: testenv.Logger(),
	})
	if err != nil {
		panic(err)
	}
	return m
}

type noAdmission struct{}

func (noAdmission) CheckPass(pass, event, user string) error { return booking.ErrNotAdmitted }

type noViewers struct{}

func (noViewers) ViewerCount(context.Context, string) (int64, bool, error) { return 0, false, nil }
