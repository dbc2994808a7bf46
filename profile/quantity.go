package profile

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
)

// Quantity is a size in bytes, written as a number of bytes or with a binary
// suffix: "40960Mi", "80Gi".
type Quantity uint64

var suffixes = []struct {
	s string
	m uint64
}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40}, {"Ki", 1 << 10}, {"Mi", 1 << 20}, {"Gi", 1 << 30}, {"Ti", 1 << 40}}

// ParseQuantity reads "123", "40960Mi", "80Gi" or "20GiB".
func ParseQuantity(s string) (Quantity, error) {
	mult := uint64(1)
	num := s
	for _, x := range suffixes {
		if strings.HasSuffix(s, x.s) {
			mult, num = x.m, strings.TrimSuffix(s, x.s)
			break
		}
	}
	n, err := strconv.ParseUint(num, 10, 64)
	if err != nil || n > ^uint64(0)/mult {
		return 0, fmt.Errorf("%q is not a quantity; use bytes or a binary suffix such as \"40960Mi\", \"80Gi\" or \"20GiB\"", s)
	}
	return Quantity(n * mult), nil
}

// UnmarshalJSON takes a number of bytes or a suffixed string.
func (q *Quantity) UnmarshalJSON(b []byte) error {
	var n uint64
	if err := json.Unmarshal(b, &n); err == nil {
		*q = Quantity(n)
		return nil
	}
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("%s is not a quantity; use bytes or a binary suffix such as \"40960Mi\"", b)
	}
	v, err := ParseQuantity(s)
	if err != nil {
		return err
	}
	*q = v
	return nil
}

// MarshalJSON writes MiB when exact, so shown profiles read like written ones.
func (q Quantity) MarshalJSON() ([]byte, error) {
	if q != 0 && q%(1<<20) == 0 {
		return json.Marshal(fmt.Sprintf("%dMi", uint64(q)>>20))
	}
	return json.Marshal(uint64(q))
}

// String writes MiB when exact, as MarshalJSON does: errors then read like
// the profile that was written.
func (q Quantity) String() string {
	if q != 0 && q%(1<<20) == 0 {
		return fmt.Sprintf("%dMi", uint64(q)>>20)
	}
	return strconv.FormatUint(uint64(q), 10)
}

// Hex32 is a 32-bit value written as hex ("0x20B010DE") or a number.
type Hex32 uint32

// UnmarshalJSON takes "0x..." strings or plain numbers.
func (h *Hex32) UnmarshalJSON(b []byte) error {
	var n uint32
	if err := json.Unmarshal(b, &n); err == nil {
		*h = Hex32(n)
		return nil
	}
	var s string
	if err := json.Unmarshal(b, &s); err == nil {
		if v, err := strconv.ParseUint(strings.TrimPrefix(strings.ToLower(s), "0x"), 16, 32); err == nil && strings.HasPrefix(strings.ToLower(s), "0x") {
			*h = Hex32(v)
			return nil
		}
	}
	return fmt.Errorf("%s is not a 32-bit hex value; write it like \"0x20B010DE\"", b)
}

// MarshalJSON writes hex.
func (h Hex32) MarshalJSON() ([]byte, error) {
	return json.Marshal(fmt.Sprintf("0x%X", uint32(h)))
}
