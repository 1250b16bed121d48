package cli

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/presenced/presenced/booking"
)

// HotelCmd is `presenced hotel create`.
func HotelCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "hotel", Short: "Manage hotels and their room inventory", Example: "  presenced hotel create --help"}
	var flags *commonFlags
	var (
		spec      booking.HotelSpec
		roomTypes string
	)
	create := &cobra.Command{
		Use:   "create --id ID --city lisbon --timezone Europe/Lisbon --room-types std:30x2@9000,suite:5x4@25000",
		Short: "Create a hotel with its room types and open its nights for sale (prices in minor units)",
		Example: `  # 30 standard rooms for two at 90.00 a night and 5 suites for four at 250.00
  presenced hotel create --id lisbon-grand --city lisbon --timezone Europe/Lisbon \
    --room-types std:30x2@9000,suite:5x4@25000`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var err error
			if spec.RoomTypes, err = booking.ParseRoomTypes(roomTypes); err != nil {
				return err
			}
			return withBooking(cmd, flags, func(b *booking.Module) error {
				sum, err := b.CreateHotel(cmd.Context(), spec)
				if err != nil {
					return err
				}
				out, _ := json.Marshal(sum)
				printf(cmd, "%s\n", out)
				return nil
			})
		},
	}
	flags = configFlags(create, flagPostgres)
	f := create.Flags()
	f.StringVar(&spec.ID, "id", "", "hotel id (letters, digits, '.', '_', '-')")
	f.StringVar(&spec.Name, "name", "", "display name (default: the id)")
	f.StringVar(&spec.City, "city", "", "city slug the hotel is searched by (lowercase, e.g. lisbon)")
	f.StringVar(&spec.Timezone, "timezone", "", "IANA time zone of the hotel's nights (e.g. Europe/Lisbon)")
	f.StringVar(&spec.Currency, "currency", "EUR", "ISO 4217 currency of the prices")
	f.StringVar(&roomTypes, "room-types", "", "room types as ID:ROOMSxGUESTS@PRICE, comma separated")
	f.IntVar(&spec.OpenNights, "open-nights", 365, "nights to open for sale from today")
	f.IntVar(&spec.HoldMinutes, "hold-minutes", 10, "how long a stay is held")
	f.BoolVar(&spec.WaitingRoom, "waiting-room", false, "holds need a pass of the waiting room named like the hotel (a flash deal)")
	cmd.AddCommand(create)
	return cmd
}

// demoCities are the cities `presenced demo` fills with hotels.
var demoCities = []struct{ city, tz, currency string }{
	{"lisbon", "Europe/Lisbon", "EUR"},
	{"paris", "Europe/Paris", "EUR"},
	{"rome", "Europe/Rome", "EUR"},
	{"berlin", "Europe/Berlin", "EUR"},
	{"oslo", "Europe/Oslo", "NOK"},
	{"prague", "Europe/Prague", "CZK"},
}

// demoHotelNames give each demo city's hotels a face.
var demoHotelNames = []string{"Grand", "Riverside", "Old Town Inn", "Station Hostel", "Harbour View"}

// demoHotels are hotels in each demo city: a few room types each, small
// enough that a load run fills some nights, priced from hostel to grand.
func demoHotels() []booking.HotelSpec {
	var out []booking.HotelSpec
	for _, c := range demoCities {
		for i, name := range demoHotelNames {
			base := int64(6000 + 4000*(len(demoHotelNames)-i))
			out = append(out, booking.HotelSpec{
				ID: fmt.Sprintf("%s-%03d", c.city, 100+i*7), Name: name + " " + titleCase(c.city), City: c.city,
				Timezone: c.tz, Currency: c.currency, OpenNights: 180,
				RoomTypes: []booking.RoomTypeSpec{
					{ID: "single", Name: "Single", Capacity: 1, Rooms: 8 + 2*i, BasePrice: base * 7 / 10},
					{ID: "double", Name: "Double", Capacity: 2, Rooms: 12 + 3*i, BasePrice: base},
					{ID: "family", Name: "Family", Capacity: 4, Rooms: 3 + i, BasePrice: base * 18 / 10},
				},
			})
		}
	}
	return out
}

func titleCase(s string) string {
	if s == "" {
		return s
	}
	return string(s[0]-'a'+'A') + s[1:]
}

// seedDemoHotels creates the demo hotels that do not exist yet.
func seedDemoHotels(cmd *cobra.Command, b *booking.Module) error {
	created := 0
	for _, spec := range demoHotels() {
		_, err := b.CreateHotel(cmd.Context(), spec)
		if errors.Is(err, booking.ErrHotelExists) {
			continue
		}
		if err != nil {
			return fmt.Errorf("demo hotel %s: %w", spec.ID, err)
		}
		created++
	}
	printf(cmd, "hotels: %d in %d cities (%d new), e.g. GET /v1/hotels?city=lisbon&checkIn=YYYY-MM-DD&checkOut=YYYY-MM-DD&guests=2\n",
		len(demoHotels()), len(demoCities), created)
	printf(cmd, "  POST /v1/viewers/lisbon-100/heartbeat  GET /v1/viewers/lisbon-100/count  POST /v1/hotels/lisbon-100/holds\n")
	return nil
}
