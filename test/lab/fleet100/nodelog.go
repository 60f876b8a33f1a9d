package main

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"
)

// A node's own log is the bench's signal that it applied a revision: the fleet source
// logs "fleet revision applied" (with the revision and the count of services) once the
// reconciler has taken it, and the node logs "node running" once its XDP program is
// attached with the services programmed. Each line carries the node's own time, taken
// as it happened, so the figures do not depend on how often the bench looks, and
// looking costs the node nothing: the bench reads the file the node writes anyway.
// Asking 100 nodes' APIs instead would load the cores the nodes share with the
// measurement (a node's status covers every one of its services).

// The messages the bench waits on (internal/fleet/source.go, internal/node).
const (
	msgApplied    = "fleet revision applied"
	msgNotApplied = "fleet revision not applied, the node keeps its previous state"
	msgChanged    = "fleet changed through the API"
	msgRunning    = "node running"
)

// logLine is one line of log/slog's text handler: time=… level=… msg=… key=value…
type logLine struct {
	at    time.Time
	msg   string
	attrs map[string]string
}

// slogTime is the text handler's time format (milliseconds).
const slogTime = "2006-01-02T15:04:05.000Z07:00"

// parseLine parses a line of the text handler; false for anything else (a panic's
// trace, a line of another format).
func parseLine(line string) (logLine, bool) {
	l := logLine{attrs: map[string]string{}}
	for s := strings.TrimSpace(line); s != ""; s = strings.TrimLeft(s, " ") {
		k, rest, ok := strings.Cut(s, "=")
		if !ok || k == "" || strings.ContainsAny(k, " \"") {
			return logLine{}, false
		}
		var v string
		if strings.HasPrefix(rest, `"`) {
			q, err := strconv.QuotedPrefix(rest)
			if err != nil {
				return logLine{}, false
			}
			v, _ = strconv.Unquote(q)
			s = rest[len(q):]
		} else {
			v, s, _ = strings.Cut(rest, " ")
		}
		l.attrs[k] = v
	}
	t, err := time.Parse(slogTime, l.attrs["time"])
	if err != nil {
		return logLine{}, false
	}
	l.at, l.msg = t, l.attrs["msg"]
	delete(l.attrs, "time")
	delete(l.attrs, "msg")
	return l, l.msg != ""
}

// event is a revision applied or written, or the node's start, as its log says.
type event struct {
	at       time.Time
	revision int64
	services int
}

// nodeLog follows one node's log file from where it was when made.
type nodeLog struct {
	path    string
	off     int64
	partial []byte // a line not finished yet

	applied []event // in order
	changed []event // the API writes this node made
	running *event  // the node's "node running", nil until then
	failed  error   // a revision the node did not apply
}

func newNodeLog(path string) *nodeLog { return &nodeLog{path: path} }

// poll reads what the node wrote since the last poll.
func (n *nodeLog) poll() error {
	f, err := os.Open(n.path)
	if err != nil {
		return err
	}
	defer f.Close()
	if _, err := f.Seek(n.off, io.SeekStart); err != nil {
		return err
	}
	data, err := io.ReadAll(f)
	if err != nil {
		return err
	}
	n.off += int64(len(data))
	n.feed(data)
	return nil
}

// feed takes bytes of the log, lines possibly cut anywhere.
func (n *nodeLog) feed(data []byte) {
	data = append(n.partial, data...)
	last := bytes.LastIndexByte(data, '\n')
	if last < 0 {
		n.partial = data
		return
	}
	n.partial = append([]byte(nil), data[last+1:]...)
	for _, line := range strings.Split(string(data[:last]), "\n") {
		l, ok := parseLine(line)
		if !ok {
			continue
		}
		rev, _ := strconv.ParseInt(l.attrs["revision"], 10, 64)
		services, _ := strconv.Atoi(l.attrs["services"])
		e := event{at: l.at, revision: rev, services: services}
		switch l.msg {
		case msgApplied:
			n.applied = append(n.applied, e)
		case msgChanged:
			n.changed = append(n.changed, e)
		case msgRunning:
			n.running = &e
		case msgNotApplied:
			n.failed = fmt.Errorf("%s: revision %d not applied: %s", n.path, rev, l.attrs["err"])
		}
	}
}

// appliedAt is when the node first applied revision rev or a later one; false if it
// has not yet.
func (n *nodeLog) appliedAt(rev int64) (time.Time, bool) {
	for _, e := range n.applied {
		if e.revision >= rev {
			return e.at, true
		}
	}
	return time.Time{}, false
}

// lastApplied is the last revision the node applied, 0 for none.
func (n *nodeLog) lastApplied() event {
	if len(n.applied) == 0 {
		return event{}
	}
	return n.applied[len(n.applied)-1]
}
