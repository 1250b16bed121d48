package viewers

// maxHotelID is the longest hotel id accepted.
const maxHotelID = 64

// validHotel tells whether id is an acceptable hotel id: 1 to 64 characters
// of letters, digits, '-', '_' and '.'. The charset keeps ids safe inside
// Redis keys (no ':' or hash-tag braces) and inside URLs.
func validHotel(id string) bool {
	if len(id) == 0 || len(id) > maxHotelID {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '-', c == '_', c == '.':
		default:
			return false
		}
	}
	return true
}
