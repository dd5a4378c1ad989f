// Package strbox puts strings into interface values (any) with fewer
// allocations than Go's own conversion.
//
// A string stored in an interface is a pointer to a string header (data
// pointer and length), and `var v any = s` allocates that header on the
// heap unless the compiler can prove it does not escape. Records carry
// their fields as []any (topology.Values), and in a word count the strings
// are most of the fields: the split bolt boxed every word it emitted and
// the decoder every string it read, two of the three allocations a word
// cost. The functions here build the interface from a header that already
// exists (Ref) or put the header and the bytes in one allocation (Copy).
//
// They write the interface's two words themselves, the layout Go has used
// for an empty interface since 1.4 (type pointer, data pointer) and that
// runtime.convTstring relies on; TestLayout fails if it ever changes.
package strbox

import "unsafe"

// eface is the layout of an empty interface.
type eface struct {
	typ  unsafe.Pointer
	data unsafe.Pointer
}

// stringType is the type word of an interface holding a string.
var stringType = func() unsafe.Pointer {
	var v any = ""
	return (*eface)(unsafe.Pointer(&v)).typ
}()

// Ref returns an interface holding *p that refers to p's header instead of
// a copy of it: no allocation. The header must not change while the
// interface is in use, and the interface keeps alive whatever p points
// into (a []string's backing array, say).
func Ref(p *string) (v any) {
	e := (*eface)(unsafe.Pointer(&v))
	e.typ = stringType
	e.data = unsafe.Pointer(p)
	return v
}

// headerSize is the size of a string header.
const headerSize = int(unsafe.Sizeof(""))

// Copy returns an interface holding a string with the bytes of b, in one
// allocation where string(b) and the conversion to any take two: the
// header and the bytes share an object, the header first. The object holds
// no pointer the garbage collector must follow (the header points into the
// object itself, which the interface keeps alive), so it is allocated as
// bytes and never scanned.
func Copy(b []byte) any {
	if len(b) == 0 {
		return ""
	}
	obj := make([]byte, headerSize+len(b))
	copy(obj[headerSize:], b)
	hdr := (*string)(unsafe.Pointer(&obj[0]))
	*hdr = unsafe.String(&obj[headerSize], len(b))
	return Ref(hdr)
}
