package store

// An API write edits one service. Rendering the whole file and parsing it again costs
// in proportion to the file (40 s for one weight among 100 000 services, issue 26), so
// when the file allows it, an edit of one service works on that service's lines alone:
// it decodes them, edits the tree, validates the service with config.ParseFileService
// (Parse's walkers, defaults and checks for one service) and config.Fits (Parse's
// checks between services, for that one), and splices the service's new lines into the
// file's bytes. Every other byte of the file stays as it was, comments included. The
// whole file is still parsed at start and on a reload; the layout of the services'
// lines comes from that parse, and each edit shifts it by what it spliced.

import (
	"bytes"
	"fmt"
	"slices"

	"gopkg.in/yaml.v3"

	"github.com/manifoldlb/manifold/internal/config"
	"github.com/manifoldlb/manifold/internal/decode"
)

// layout is where each service's lines are in the file's bytes: spans[i] holds the
// item of cfg.Services[i] in the services list, from the start of the line of its dash
// to the end of its last line (its newline included when it has one). Comment and
// blank lines after an item at the dash's indentation or less (the head comment of
// the next item, of the next top-level key) are in no span: an edit keeps them.
type layout struct {
	dash  int // the column (0-based) of the items' dashes
	spans []span
}

type span struct{ start, end int }

// layoutOf finds where the services of a parsed file are, or returns nil when an edit
// of one service cannot be spliced into this file and must render the whole tree:
// the file has no services (or a fleet section), its list is in flow style
// ([...]), items share nodes through anchors and aliases or merge keys, a service
// holds a block scalar (| or >, whose trailing lines are content), the items' dashes
// are not at one column, or lines end in anything but LF.
func layoutOf(root *yaml.Node, data []byte, cfg *config.Config) *layout {
	if cfg.Fleet != nil || len(cfg.Services) == 0 || !onlyLF(data) {
		return nil
	}
	var list, next *yaml.Node // the services list, and the top-level key after it
	for i := 0; i+1 < len(root.Content); i += 2 {
		if root.Content[i].Value == "services" && root.Content[i].ShortTag() != "!!merge" {
			list = root.Content[i+1]
			if i+2 < len(root.Content) {
				next = root.Content[i+2]
			}
		}
	}
	if list == nil || list.Kind != yaml.SequenceNode || list.Style&yaml.FlowStyle != 0 ||
		len(list.Content) != len(cfg.Services) || !spliceable(list) {
		return nil
	}
	lines := lineStarts(data)
	bound := len(data) // where the services list ends: the next top-level key, or the end
	if next != nil {
		if next.Line < 1 || next.Line > len(lines) {
			return nil
		}
		bound = lines[next.Line-1]
	}
	l := &layout{dash: -1, spans: make([]span, len(list.Content))}
	for i, item := range list.Content {
		if item.Line < 1 || item.Line > len(lines) || item.Column < 3 || lines[item.Line-1]+item.Column-1 > len(data) {
			return nil
		}
		start := lines[item.Line-1]
		dash := dashAt(data[start : start+item.Column-1])
		if dash < 0 || l.dash >= 0 && dash != l.dash {
			return nil
		}
		l.dash = dash
		l.spans[i].start = start
		if i > 0 {
			if start <= l.spans[i-1].start {
				return nil
			}
			l.spans[i-1].end = trimTail(data, l.spans[i-1].start, start, dash)
		}
	}
	last := len(l.spans) - 1
	if bound <= l.spans[last].start {
		return nil
	}
	l.spans[last].end = trimTail(data, l.spans[last].start, bound, l.dash)
	return l
}

// onlyLF tells whether every line break yaml.v3 counts in data is a LF: it also
// counts CR and the Unicode breaks NEL, LS and PS, which would make its line numbers
// disagree with the lines counted here.
func onlyLF(data []byte) bool {
	return bytes.IndexByte(data, '\r') < 0 && !bytes.Contains(data, []byte("\u0085")) &&
		!bytes.Contains(data, []byte("\u2028")) && !bytes.Contains(data, []byte("\u2029"))
}

// spliceable tells whether no node under n has an anchor, is an alias or a merge key,
// or is a block scalar.
func spliceable(n *yaml.Node) bool {
	if n.Anchor != "" || n.Kind == yaml.AliasNode || n.Style&(yaml.LiteralStyle|yaml.FoldedStyle) != 0 ||
		n.Kind == yaml.ScalarNode && n.ShortTag() == "!!merge" {
		return false
	}
	for _, c := range n.Content {
		if !spliceable(c) {
			return false
		}
	}
	return true
}

// lineStarts is the offset of the start of each line of data.
func lineStarts(data []byte) []int {
	starts := []int{0}
	for i, c := range data {
		if c == '\n' && i+1 < len(data) {
			starts = append(starts, i+1)
		}
	}
	return starts
}

// dashAt returns the column of the dash of a sequence item whose line begins with
// prefix (spaces, a dash, one or more spaces), or -1.
func dashAt(prefix []byte) int {
	d := 0
	for d < len(prefix) && prefix[d] == ' ' {
		d++
	}
	if d+1 >= len(prefix) || prefix[d] != '-' || len(bytes.TrimLeft(prefix[d+1:], " ")) != 0 {
		return -1
	}
	return d
}

// trimTail returns where the item starting at start ends, given that the next thing
// in the file starts at end: before the blank lines, the comment lines indented no
// more than the dash, and the document markers that precede it. Those belong to
// what follows (its head comment) and stay where they are on an edit.
func trimTail(data []byte, start, end, dash int) int {
	for end > start {
		ls := bytes.LastIndexByte(data[start:end-1], '\n') + 1 + start // the last line's start
		if ls == start {
			break // the item's first line is its own
		}
		line := bytes.TrimSuffix(data[ls:end], []byte("\n"))
		body := bytes.TrimLeft(line, " ")
		indent := len(line) - len(body)
		if len(body) != 0 && !(body[0] == '#' && indent <= dash) &&
			!(indent == 0 && (bytes.HasPrefix(body, []byte("---")) || bytes.HasPrefix(body, []byte("...")))) {
			break
		}
		end = ls
	}
	return end
}

// item decodes the item at span sp: the service's mapping, as the file has it.
func (l *layout) item(data []byte, sp span) (*yaml.Node, error) {
	doc, err := decode.YAML(l.dedent(data[sp.start:sp.end]))
	if err != nil {
		return nil, err
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) != 1 || doc.Content[0].Kind != yaml.SequenceNode ||
		len(doc.Content[0].Content) != 1 || doc.Content[0].Content[0].Kind != yaml.MappingNode {
		return nil, errNotOneService
	}
	return doc.Content[0].Content[0], nil
}

var errNotOneService = &Error{Kind: Failed, Problems: []Problem{{Message: "the service's lines in the config file are not one YAML mapping"}}}

// dedent takes the dash's indentation off each line (the leading spaces of a line
// indented less: a comment).
func (l *layout) dedent(b []byte) []byte {
	out := make([]byte, 0, len(b))
	for line := range bytes.Lines(b) {
		n := 0
		for n < l.dash && n < len(line) && line[n] == ' ' {
			n++
		}
		out = append(out, line[n:]...)
	}
	return out
}

// text renders a service's mapping as an item of the file's services list: a one-item
// list, each line indented to the dash's column (an empty line stays empty).
func (l *layout) text(item *yaml.Node) ([]byte, error) {
	b, err := render(&yaml.Node{Kind: yaml.DocumentNode, Content: []*yaml.Node{{Kind: yaml.SequenceNode, Tag: "!!seq", Content: []*yaml.Node{item}}}})
	if err != nil {
		return nil, err
	}
	pad := bytes.Repeat([]byte(" "), l.dash)
	out := make([]byte, 0, len(b)+l.dash*bytes.Count(b, []byte("\n")))
	for line := range bytes.Lines(b) {
		if len(line) > 1 {
			out = append(out, pad...)
		}
		out = append(out, line...)
	}
	return out, nil
}

// splice returns data with service i's span replaced by text (i == len(spans): text
// appended after the last service; text nil: the service removed), and the layout of
// the result. data and l are left as they were.
func (l *layout) splice(data []byte, i int, text []byte) ([]byte, *layout) {
	var at span
	if i < len(l.spans) {
		at = l.spans[i]
	} else {
		end := l.spans[len(l.spans)-1].end
		at = span{end, end}
		if end > 0 && data[end-1] != '\n' {
			text = append([]byte("\n"), text...)
		}
	}
	out := make([]byte, 0, len(data)-(at.end-at.start)+len(text))
	out = append(append(append(out, data[:at.start]...), text...), data[at.end:]...)
	next := &layout{dash: l.dash, spans: make([]span, 0, len(l.spans)+1)}
	next.spans = append(next.spans, l.spans[:i]...)
	if text != nil {
		s := span{at.start, at.start + len(text)}
		if i == len(l.spans) && len(text) > 0 && text[0] == '\n' {
			s.start++
		}
		next.spans = append(next.spans, s)
	}
	if i < len(l.spans) {
		delta := len(text) - (at.end - at.start)
		for _, s := range l.spans[i+1:] {
			next.spans = append(next.spans, span{s.start + delta, s.end + delta})
		}
	}
	return out, next
}

// fileService validates a service's mapping alone within the node's config, with
// Parse's errors for it, their fields relative to the service or to its part within
// ("backends[1]": the backend a request is about).
func fileService(path string, item *yaml.Node, node *config.Config, within string) (*config.Service, error) {
	data, err := render(&yaml.Node{Kind: yaml.DocumentNode, Content: []*yaml.Node{item}})
	if err != nil {
		return nil, fail(Invalid, "", "cannot render the service: %v", err)
	}
	svc, err := config.ParseFileService(path, data, node)
	if err != nil {
		prefix := "services[0]"
		if within != "" {
			prefix += "." + within
		}
		return nil, invalid(err, prefix)
	}
	return svc, nil
}

// spliced is the change of an edit of service i alone: its YAML item (nil: removed),
// rendered at the list's indentation, and its validated state svc in place of the old
// ones (i == len(services): added). What must hold between services is checked here
// (config.Fits), with Parse's errors.
func (e *edit) spliced(i int, item *yaml.Node, svc *config.Service) (*Change, error) {
	var text []byte
	if item != nil {
		var err error
		if text, err = e.layout.text(item); err != nil {
			return nil, fail(Failed, "", "cannot render the service: %v", err)
		}
	}
	var cfg *config.Config
	switch {
	case svc == nil && len(e.cfg.Services) == 1:
		cfg = e.with(nil) // as Parse reads a list with no item
	case svc == nil:
		cfg = e.with(slices.Delete(slices.Clone(e.cfg.Services), i, i+1))
	case i == len(e.cfg.Services):
		cfg = e.with(append(slices.Clip(e.cfg.Services), *svc))
	default:
		cfg = e.with(slices.Clone(e.cfg.Services))
		cfg.Services[i] = *svc
	}
	if svc != nil {
		if err := config.Fits(e.s.path, cfg, i); err != nil {
			return nil, invalid(err, fmt.Sprintf("services[%d]", i))
		}
	}
	data, l := e.layout.splice(e.data, i, text)
	if len(cfg.Services) == 0 {
		l = nil // an edit of a file without services renders the whole tree
	}
	return &Change{Config: cfg, data: data, prev: e.data, prevCfg: e.cfg, write: true, layout: l, prevLayout: e.layout, at: i + 1}, nil
}
