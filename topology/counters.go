package topology

import (
	"encoding/binary"
	"math/bits"
	"math/rand/v2"
	"strings"
	"unsafe"
)

// Counters are int64 values by key; a missing key counts 0.
//
// Keys of up to 16 bytes, every word of a word count, live in an open
// addressing table of their own: a slot holds the key's bytes, its count
// and a tag made of its hash and length, so that Add of a key already
// counted reads one slot, usually one cache line. A Go map of strings,
// what Counters were before, reads the group's control word, the slot,
// the key's bytes elsewhere and, to save a second lookup on update, a
// counter the slot pointed to: four lines, which in a running topology the
// Bloom filters and the other tasks on the core had often pushed out of
// cache (Counters.Add was a ninth of word count's CPU time with dedup on).
// Longer keys go to a Go map of pointers into small slabs of counters.
// Keys are copied: a key taken from a record shares the bytes of its frame
// or line, which the state would otherwise keep alive.
type Counters struct {
	slots []counterSlot // len is a power of two, or 0 before the first short key
	used  int           // slots holding a key or a tombstone
	live  int           // slots holding a key
	seed  [2]uint64     // of the hash, random per collection

	long map[string]*int64 // keys longer than inlineKey
	slab []int64           // where the next long keys' counters go
}

// inlineKey is the longest key a slot holds.
const inlineKey = 16

// counterSlot is one slot: 32 bytes, two to a cache line. tag is 0 for a
// slot never used, tombstone for one whose key was deleted, and otherwise
// the key's hash with its low five bits replaced by the key's length + 1.
type counterSlot struct {
	tag uint64
	n   int64
	k   inlined
}

// inlined is a key of up to 16 bytes in two words, read from the string
// with overlapping loads (as wyhash reads its tail): with 8 to 16 bytes
// the first and the last eight, with 4 to 7 the first and the last four,
// with 1 to 3 the first, middle and last byte. Every byte of the key is
// in it, so with the length (in the tag) it is the key, and reading it
// takes no loop. A struct, not an array: Go passes a struct of two words
// in registers, an array through memory.
type inlined struct{ a, b uint64 }

const (
	tombstone = 1 // no key's tag: tagOf sets a bit above the length's
	lenBits   = 5
	lenMask   = 1<<lenBits - 1
)

// counterSlab is how many long keys' counters one allocation makes room
// for.
const counterSlab = 64

func newCounters() *Counters {
	return &Counters{seed: [2]uint64{rand.Uint64(), rand.Uint64()}}
}

// inline returns key, at most inlineKey bytes, as inlined.
func inline(key string) inlined {
	n := len(key)
	p := unsafe.Pointer(unsafe.StringData(key))
	switch {
	case n >= 8:
		return inlined{load64(p, 0), load64(p, n-8)}
	case n >= 4:
		return inlined{uint64(load32(p, 0)), uint64(load32(p, n-4))}
	case n > 0:
		return inlined{a: uint64(load8(p, 0))<<16 | uint64(load8(p, n>>1))<<8 | uint64(load8(p, n-1))}
	}
	return inlined{}
}

// String returns the key k holds, n bytes long.
func (k inlined) String(n int) string {
	var b [inlineKey]byte
	switch {
	case n >= 8:
		binary.LittleEndian.PutUint64(b[n-8:], k.b)
		binary.LittleEndian.PutUint64(b[:], k.a)
	case n >= 4:
		binary.LittleEndian.PutUint32(b[n-4:], uint32(k.b))
		binary.LittleEndian.PutUint32(b[:], uint32(k.a))
	case n > 0:
		b[n-1], b[n>>1], b[0] = byte(k.a), byte(k.a>>8), byte(k.a>>16)
	}
	return string(b[:n])
}

func load64(p unsafe.Pointer, off int) uint64 {
	return binary.LittleEndian.Uint64(unsafe.Slice((*byte)(unsafe.Add(p, off)), 8))
}

func load32(p unsafe.Pointer, off int) uint32 {
	return binary.LittleEndian.Uint32(unsafe.Slice((*byte)(unsafe.Add(p, off)), 4))
}

func load8(p unsafe.Pointer, off int) byte { return *(*byte)(unsafe.Add(p, off)) }

// tagOf returns the tag of a key of n bytes that inlines to k: a hash of
// the two words with the collection's seed (wyhash's multiply and fold,
// twice), its low bits the length.
func (c *Counters) tagOf(k inlined, n int) uint64 {
	hi, lo := bits.Mul64(k.a^c.seed[0], k.b^c.seed[1]^uint64(n))
	h := hi ^ lo
	hi, lo = bits.Mul64(h^c.seed[0], h^0xe7037ed1a0b428db)
	h = (hi ^ lo) &^ lenMask
	if h == 0 {
		h = 1 << lenBits // keeps every tag apart from tombstone
	}
	return h | uint64(n+1)
}

// find returns the index of key's slot, or -1, and the index of the first
// free slot on its probe sequence (a tombstone or an empty slot) for an
// insert.
func (c *Counters) find(tag uint64, k inlined) (at, free int) {
	if len(c.slots) == 0 {
		return -1, -1
	}
	mask := uint64(len(c.slots) - 1)
	free = -1
	for i := (tag >> lenBits) & mask; ; i = (i + 1) & mask {
		s := &c.slots[i]
		switch {
		case s.tag == tag && s.k == k:
			return int(i), free
		case s.tag == 0:
			if free < 0 {
				free = int(i)
			}
			return -1, free
		case s.tag == tombstone && free < 0:
			free = int(i)
		}
	}
}

// Add adds delta to key's counter and returns the new value.
func (c *Counters) Add(key string, delta int64) int64 {
	if len(key) > inlineKey {
		return c.addLong(key, delta)
	}
	k := inline(key)
	tag := c.tagOf(k, len(key))
	if len(c.slots) > 0 { // find's loop for a key present, without a call
		mask := uint64(len(c.slots) - 1)
		for i := (tag >> lenBits) & mask; ; i = (i + 1) & mask {
			s := &c.slots[i]
			if s.tag == tag && s.k == k {
				s.n += delta
				return s.n
			}
			if s.tag == 0 {
				break
			}
		}
	}
	_, free := c.find(tag, k)
	c.insert(tag, k, delta, free)
	return delta
}

// insert puts a key that c does not hold into free, or grows the table
// first when it would be more than five eighths full, tombstones counted:
// probes stay short (under two slots on average for a key present at that
// load, two slots to a cache line), and every probe sequence ends at an
// empty slot.
func (c *Counters) insert(tag uint64, k inlined, n int64, free int) {
	if free < 0 || (c.slots[free].tag == 0 && (c.used+1)*8 > len(c.slots)*5) {
		c.rehash()
		_, free = c.find(tag, k)
	}
	s := &c.slots[free]
	if s.tag == 0 {
		c.used++
	}
	*s = counterSlot{tag: tag, n: n, k: k}
	c.live++
}

// rehash moves the keys into a new table with room for twice as many,
// dropping tombstones.
func (c *Counters) rehash() {
	size := 16
	for (c.live+1)*8 > size*5/2 {
		size *= 2
	}
	old := c.slots
	c.slots, c.used = make([]counterSlot, size), c.live
	mask := uint64(size - 1)
	for i := range old {
		s := &old[i]
		if s.tag <= tombstone {
			continue
		}
		j := (s.tag >> lenBits) & mask
		for c.slots[j].tag != 0 {
			j = (j + 1) & mask
		}
		c.slots[j] = *s
	}
}

func (c *Counters) addLong(key string, delta int64) int64 {
	if p := c.long[key]; p != nil {
		*p += delta
		return *p
	}
	if c.long == nil {
		c.long = map[string]*int64{}
	}
	if len(c.slab) == 0 {
		c.slab = make([]int64, counterSlab)
	}
	p := &c.slab[0]
	c.slab = c.slab[1:]
	*p = delta
	c.long[strings.Clone(key)] = p
	return delta
}

// Get returns key's counter.
func (c *Counters) Get(key string) int64 {
	n, _ := c.get(key)
	return n
}

func (c *Counters) get(key string) (int64, bool) {
	if len(key) > inlineKey {
		if p := c.long[key]; p != nil {
			return *p, true
		}
		return 0, false
	}
	k := inline(key)
	if at, _ := c.find(c.tagOf(k, len(key)), k); at >= 0 {
		return c.slots[at].n, true
	}
	return 0, false
}

// Delete removes key.
func (c *Counters) Delete(key string) {
	if len(key) > inlineKey {
		delete(c.long, key)
		return
	}
	k := inline(key)
	if at, _ := c.find(c.tagOf(k, len(key)), k); at >= 0 {
		c.slots[at] = counterSlot{tag: tombstone}
		c.live--
	}
}

// Len is the number of keys.
func (c *Counters) Len() int { return c.live + len(c.long) }

// Range calls fn for every key until fn returns false, in no order. As
// with a Go map, fn may delete keys or add others, which Range may or may
// not visit; it visits every other key once, with its current count.
func (c *Counters) Range(fn func(key string, n int64) bool) {
	slots := c.slots
	for i := range slots {
		s := &slots[i]
		if s.tag <= tombstone {
			continue
		}
		key := s.k.String(int(s.tag&lenMask - 1))
		n := s.n
		if len(c.slots) != len(slots) || &c.slots[0] != &slots[0] {
			// fn added keys and the table grew: slots is the old table,
			// whose counts and deletions no longer change.
			var ok bool
			if n, ok = c.get(key); !ok {
				continue
			}
		}
		if !fn(key, n) {
			return
		}
	}
	for k, p := range c.long {
		if !fn(k, *p) {
			return
		}
	}
}

// keys yields every key, as Range does.
func (c *Counters) keys(yield func(string) bool) {
	c.Range(func(k string, _ int64) bool { return yield(k) })
}

// appendEntry appends key and its count as a snapshot holds them.
func (c *Counters) appendEntry(dst []byte, key string) []byte {
	return binary.AppendVarint(appendString(dst, key), c.Get(key))
}
