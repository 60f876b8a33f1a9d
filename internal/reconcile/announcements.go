package reconcile

import "maps"

// announcements is the view's announcements by service: a map that no view writes once
// published, and the few announcements changed since it was copied, so that a change
// to one service among 100 000 does not copy 100 000 announcements. Once the changes
// outgrow a sixteenth of the base, the base is copied again: a copy now and then, in
// proportion to the changes since the last.
type announcements struct {
	base   map[string]Announcement
	recent map[string]announced // read before base
}

// announced is a service's announcement in announcements.recent; ok false: the service
// is not served any more.
type announced struct {
	Announcement
	ok bool
}

func (a announcements) get(name string) (Announcement, bool) {
	if r, ok := a.recent[name]; ok {
		return r.Announcement, r.ok
	}
	st, ok := a.base[name]
	return st, ok
}

// with is a with changes; all is every announcement now, which it copies as the new
// base once the changes are many.
func (a announcements) with(changes map[string]announced, all map[string]Announcement) announcements {
	if len(a.recent)+len(changes) > 64+len(a.base)/16 {
		return announcements{base: maps.Clone(all)}
	}
	recent := make(map[string]announced, len(a.recent)+len(changes))
	maps.Copy(recent, a.recent)
	maps.Copy(recent, changes)
	return announcements{base: a.base, recent: recent}
}
