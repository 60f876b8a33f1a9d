// Package decode is the one place where text from outside (config files, API bodies,
// the tunnel's files, etcd documents) becomes a tree, and the one place that bounds it:
// how large it may be, how deeply it may nest, and how far its YAML aliases may
// expand. A file or a body is hostile until it passed here: a small document must not
// be able to make a reader do unbounded work, use unbounded memory, or recurse deeper
// than a goroutine's stack (a stack overflow kills the whole process; Go cannot
// recover it).
//
//	bytes ─► Read / ReadFile (size) ─► YAML / JSON (syntax) ─► Check (depth, aliases) ─► *yaml.Node
//
// Every tree this package returns is safe to walk recursively, to copy with its
// aliases expanded, and to encode again.
package decode

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"gopkg.in/yaml.v3"
)

const (
	// MaxDepth bounds how deeply a document nests (mappings and lists inside each
	// other, aliases followed). The deepest legitimate document, a config file, nests
	// about 8 levels; 64 leaves room for anything the schema may grow and keeps every
	// recursive walk (ours, yaml.v3's encoder) far from the stack's limit.
	MaxDepth = 64
	// MaxAliasNodes bounds how many nodes aliases (`*a`, merge keys `<<: *a`) may add
	// to a YAML document once expanded, beyond the nodes written in it. An edit
	// through the API expands every alias (so that editing one service cannot change
	// another), so this is also how much an edit may make the file grow. Sharing a
	// backend list of 50 among 100 services adds about 25 000 nodes; a 783-byte file
	// of 10-way merge keys nested 5 levels adds millions.
	MaxAliasNodes = 1 << 16
	// MaxFileSize bounds a file manifold reads (node, backend, steer, link, tokens and
	// connector files, and the files a connector file names) and an etcd document:
	// yaml.v3 holds about 20 bytes of tree per byte of text. A node file of 100 000
	// backends is about 3 MiB.
	MaxFileSize = 32 << 20
	// MaxBodySize bounds an API request body: a service with thousands of backends fits.
	MaxBodySize = 1 << 20
)

// An Error is a document refused here: Line is the line of the construct at fault
// (1-based; 0 when unknown), Msg says what and names the limit.
type Error struct {
	Line int
	Msg  string
}

func (e *Error) Error() string {
	if e.Line > 0 {
		return fmt.Sprintf("line %d: %s", e.Line, e.Msg)
	}
	return e.Msg
}

// ErrTooLarge is the error of a file, body or document larger than its limit
// (errors.Is matches any of them).
var ErrTooLarge = errors.New("larger than the limit")

// tooLarge says what was too large and the limit, and is ErrTooLarge.
type tooLarge struct {
	what  string
	limit int64
}

func (e tooLarge) Error() string {
	return fmt.Sprintf("%s is larger than the limit of %d bytes", e.what, e.limit)
}

func (e tooLarge) Is(target error) bool { return target == ErrTooLarge }

// Read reads r to the end, refusing more than limit bytes (what names the input, for
// the message).
func Read(r io.Reader, limit int64, what string) ([]byte, error) {
	data, err := io.ReadAll(io.LimitReader(r, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > limit {
		return nil, tooLarge{what, limit}
	}
	return data, nil
}

// ReadFile reads a file of at most MaxFileSize bytes. Its errors are os.ReadFile's
// (a *fs.PathError) or ErrTooLarge.
func ReadFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := Read(f, MaxFileSize, "the file")
	if err != nil && !errors.Is(err, ErrTooLarge) {
		return nil, &os.PathError{Op: "read", Path: path, Err: err}
	}
	return data, err
}

// Size refuses a document of more than limit bytes that arrived whole (an etcd value).
func Size(data []byte, limit int) error {
	if len(data) > limit {
		return tooLarge{fmt.Sprintf("the document (%d bytes)", len(data)), int64(limit)}
	}
	return nil
}

// YAML decodes the first document of data into its document node and checks it
// (Check). Documents after the first are left to the caller (Decoder reads them).
// Empty input gives io.EOF.
func YAML(data []byte) (*yaml.Node, error) {
	if err := Size(data, MaxFileSize); err != nil {
		return nil, err
	}
	return NewDecoder(data).Next()
}

// A Decoder reads the YAML documents of data one by one, each checked.
type Decoder struct{ dec *yaml.Decoder }

func NewDecoder(data []byte) *Decoder {
	return &Decoder{dec: yaml.NewDecoder(bytes.NewReader(data))}
}

// Next returns the next document node, io.EOF after the last, or an error: a syntax
// error as yaml.v3 words it, or an *Error of Check.
func (d *Decoder) Next() (doc *yaml.Node, err error) {
	defer func() {
		// a config file must never crash the daemon: a panic of the decoder is an error
		if r := recover(); r != nil {
			doc, err = nil, fmt.Errorf("yaml: %v", r)
		}
	}()
	var n yaml.Node
	if err := d.dec.Decode(&n); err != nil {
		return nil, err
	}
	if err := Check(&n); err != nil {
		return nil, err
	}
	return &n, nil
}

// Check bounds a YAML tree: it nests at most MaxDepth levels (following aliases),
// its aliases expand to at most MaxAliasNodes nodes beyond those written, and no
// alias refers to a node that contains it (which would expand forever). It walks each
// written node once and stops at the first problem, so it is cheap on any input.
func Check(root *yaml.Node) error {
	c := checker{sizes: map[*yaml.Node]measure{}, open: map[*yaml.Node]bool{}}
	_, err := c.walk(root, 0)
	return err
}

// measure is what a node becomes once its aliases are expanded.
type measure struct {
	nodes  int // nodes, itself included (saturated at maxCount)
	height int // levels of mappings and lists, itself included (0 for a scalar)
}

// maxCount keeps node counts from overflowing: any count past it is refused anyway.
const maxCount = 1 << 40

type checker struct {
	sizes map[*yaml.Node]measure // nodes walked
	open  map[*yaml.Node]bool    // nodes being walked: an alias to one is a cycle
	extra int                    // nodes aliases added so far
}

// walk measures n, which depth mappings and lists enclose.
func (c *checker) walk(n *yaml.Node, depth int) (measure, error) {
	if n.Kind == yaml.AliasNode {
		return c.alias(n, depth)
	}
	inner := depth
	if n.Kind == yaml.MappingNode || n.Kind == yaml.SequenceNode {
		if inner++; inner > MaxDepth {
			return measure{}, &Error{Line: n.Line, Msg: fmt.Sprintf("nested more than %d levels deep (the limit)", MaxDepth)}
		}
	}
	c.open[n] = true
	m := measure{nodes: 1}
	for _, k := range n.Content {
		km, err := c.walk(k, inner)
		if err != nil {
			return m, err
		}
		m.nodes = min(m.nodes+km.nodes, maxCount)
		m.height = max(m.height, km.height)
	}
	m.height += inner - depth
	delete(c.open, n)
	c.sizes[n] = m
	return m, nil
}

// alias counts what an alias adds once expanded: the nodes of its target, less itself.
func (c *checker) alias(n *yaml.Node, depth int) (measure, error) {
	t := n.Alias
	if t == nil {
		return measure{nodes: 1}, nil
	}
	if c.open[t] {
		return measure{}, &Error{Line: n.Line, Msg: fmt.Sprintf("alias *%s refers to a node that contains it: it would expand forever", t.Anchor)}
	}
	m, ok := c.sizes[t]
	if !ok {
		// only a tree built by hand gets here: in a document the anchor comes first
		var err error
		if m, err = c.walk(t, depth); err != nil {
			return m, err
		}
	}
	if depth+m.height > MaxDepth {
		return m, &Error{Line: n.Line, Msg: fmt.Sprintf("alias *%s nests the document more than %d levels deep (the limit)", t.Anchor, MaxDepth)}
	}
	c.extra = min(c.extra+m.nodes-1, maxCount)
	if c.extra > MaxAliasNodes {
		return m, &Error{Line: n.Line, Msg: fmt.Sprintf("too many aliases: they expand to more than %d nodes beyond those written (the limit), at alias *%s", MaxAliasNodes, t.Anchor)}
	}
	return m, nil
}

// JSON decodes a JSON document into a YAML node of the same structure, keeping the
// order of keys and the JSON types as YAML tags (so that a parser of the YAML tree
// reports a string where a number belongs exactly as it does for a file). It refuses
// more than MaxBodySize bytes, nesting deeper than MaxDepth, duplicate keys and data
// after the value.
func JSON(data []byte) (*yaml.Node, error) {
	if err := Size(data, MaxBodySize); err != nil {
		return nil, err
	}
	if err := jsonDepth(data); err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	n, err := jsonValue(dec)
	if err != nil {
		return nil, fmt.Errorf("not valid JSON: %w", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("not valid JSON: data after the top-level value")
	}
	return n, nil
}

// jsonValue decodes the next value (recursively: jsonDepth bounded the nesting).
func jsonValue(dec *json.Decoder) (*yaml.Node, error) {
	tok, err := dec.Token()
	if err == io.EOF {
		return nil, io.ErrUnexpectedEOF
	}
	if err != nil {
		return nil, err
	}
	switch t := tok.(type) {
	case json.Delim:
		if t == '[' {
			seq := &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq"}
			for dec.More() {
				v, err := jsonValue(dec)
				if err != nil {
					return nil, err
				}
				seq.Content = append(seq.Content, v)
			}
			_, err := dec.Token() // ]
			return seq, err
		}
		m := &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
		seen := map[string]bool{}
		for dec.More() {
			k, err := dec.Token()
			if err != nil {
				return nil, err
			}
			key := k.(string) // the decoder only yields strings as object keys
			if seen[key] {
				return nil, fmt.Errorf("duplicate key %q", key)
			}
			seen[key] = true
			v, err := jsonValue(dec)
			if err != nil {
				return nil, err
			}
			m.Content = append(m.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: key}, v)
		}
		_, err := dec.Token() // }
		return m, err
	case string:
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: t}, nil
	case json.Number:
		tag := "!!int"
		if strings.ContainsAny(t.String(), ".eE") {
			tag = "!!float"
		}
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: tag, Value: t.String()}, nil
	case bool:
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!bool", Value: fmt.Sprint(t)}, nil
	default: // nil
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!null", Value: "null"}, nil
	}
}

// JSONInto decodes a JSON record (an etcd value, a control message) into v, after
// bounding its size (limit) and its nesting (MaxDepth). Unknown fields are ignored, so
// that a newer writer's records stay readable.
func JSONInto(data []byte, limit int, v any) error {
	if err := Size(data, limit); err != nil {
		return err
	}
	if err := jsonDepth(data); err != nil {
		return err
	}
	return json.Unmarshal(data, v)
}

// jsonDepth refuses JSON nested more than MaxDepth arrays and objects deep. It only
// counts brackets outside strings; whether the text is JSON is the decoder's to say.
func jsonDepth(data []byte) error {
	depth, inString, escaped := 0, false, false
	for i, b := range data {
		switch {
		case inString:
			switch {
			case escaped:
				escaped = false
			case b == '\\':
				escaped = true
			case b == '"':
				inString = false
			}
		case b == '"':
			inString = true
		case b == '[' || b == '{':
			if depth++; depth > MaxDepth {
				return &Error{Msg: fmt.Sprintf("JSON nested more than %d levels deep (the limit), at byte %d", MaxDepth, i)}
			}
		case b == ']' || b == '}':
			if depth--; depth < 0 {
				return nil // a closer with nothing open: not JSON, the decoder refuses it there
			}
		}
	}
	return nil
}
