package reconcile

// idAllocator hands out ids in [1, max) and reuses a freed id only after every other
// free one was used once: a flow entry that still names a freed backend id then points
// at an unused slot (re-hashed) for as long as possible, not at a newcomer.
type idAllocator struct {
	max  uint32
	next uint32
	used map[uint32]bool
}

func newIDAllocator(max uint32) *idAllocator {
	return &idAllocator{max: max, next: 1, used: map[uint32]bool{}}
}

func (a *idAllocator) alloc() (uint32, bool) {
	if len(a.used) >= int(a.max)-1 {
		return 0, false
	}
	for a.used[a.next] {
		a.advance()
	}
	id := a.next
	a.used[id] = true
	a.advance()
	return id, true
}

func (a *idAllocator) advance() {
	a.next++
	if a.next >= a.max {
		a.next = 1
	}
}

func (a *idAllocator) free(id uint32) { delete(a.used, id) }
