package store

// Edits work on the YAML node tree of the config file rather than on the model, so
// that everything the operator wrote and the edit does not touch (comments, order,
// fields this package knows nothing about) is written back as it was.

import (
	"bytes"
	"errors"
	"fmt"
	"net/netip"

	"gopkg.in/yaml.v3"

	"github.com/manifoldlb/manifold/internal/decode"
)

// parseTree decodes a config file into its document node. The file has been accepted
// by config.Parse before, so it is one well-formed document, and package decode bounds
// it again here: expanding its aliases adds at most decode.MaxAliasNodes nodes.
func parseTree(data []byte) (*yaml.Node, error) {
	doc, err := decode.YAML(data)
	if err != nil {
		return nil, err
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) != 1 || doc.Content[0].Kind != yaml.MappingNode {
		return nil, errors.New("the config file is not a single YAML mapping")
	}
	expandAliases(doc)
	return doc, nil
}

// render encodes a document the way the file is written: two-space indentation.
func render(doc *yaml.Node) ([]byte, error) {
	var b bytes.Buffer
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(doc); err != nil {
		return nil, err
	}
	if err := enc.Close(); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// expandAliases replaces every alias by a private copy of what it stands for and drops
// the anchors, so that an edit of one service cannot change another that shared a
// node with it (`backends: *pool`, `<<: *web`). The meaning of the file is unchanged;
// the tree must have passed decode.Check, which bounds what the copies add and refuses
// an alias inside the node it refers to (that would copy forever).
func expandAliases(n *yaml.Node) {
	n.Anchor = ""
	if n.Kind == yaml.ScalarNode && n.Tag == "!!merge" {
		n.Tag = "" // implicit, as written: the encoder would spell out "!!merge <<"
	}
	for i, c := range n.Content {
		if c.Kind == yaml.AliasNode && c.Alias != nil {
			n.Content[i] = deepCopy(c.Alias)
		}
		expandAliases(n.Content[i])
	}
}

func deepCopy(n *yaml.Node) *yaml.Node {
	for n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	c := *n
	c.Anchor = ""
	c.Content = make([]*yaml.Node, len(n.Content))
	for i, k := range n.Content {
		c.Content[i] = deepCopy(k)
	}
	return &c
}

// lookup finds key in a mapping the way config.Parse reads it: the mapping's own keys
// first, then those of the mappings it merges (<<), in order. It returns the mapping
// that holds the key (which may be a merged one) and the index of the value in its
// Content, or nil.
func lookup(m *yaml.Node, key string) (*yaml.Node, int) {
	if m == nil || m.Kind != yaml.MappingNode {
		return nil, 0
	}
	var merged []*yaml.Node
	for i := 0; i+1 < len(m.Content); i += 2 {
		k := m.Content[i]
		if k.ShortTag() == "!!merge" {
			v := m.Content[i+1]
			if v.Kind == yaml.SequenceNode {
				merged = append(merged, v.Content...)
			} else {
				merged = append(merged, v)
			}
			continue
		}
		if k.Value == key {
			return m, i + 1
		}
	}
	for _, mm := range merged {
		if holder, i := lookup(mm, key); holder != nil {
			return holder, i
		}
	}
	return nil, 0
}

// get returns the value of key in m (see lookup), or nil.
func get(m *yaml.Node, key string) *yaml.Node {
	if holder, i := lookup(m, key); holder != nil {
		return holder.Content[i]
	}
	return nil
}

// set replaces the value of key in m (where lookup finds it), or appends the key.
func set(m *yaml.Node, key string, v *yaml.Node) {
	if holder, i := lookup(m, key); holder != nil {
		holder.Content[i] = v
		return
	}
	m.Content = append(m.Content, strNode(key), v)
}

func strNode(s string) *yaml.Node {
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: s}
}

func intNode(v uint32) *yaml.Node {
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!int", Value: fmt.Sprint(v)}
}

// services returns the services list of a document, creating it (empty) when the file
// has none or `services:` with no value.
func services(doc *yaml.Node) *yaml.Node {
	root := doc.Content[0]
	s := get(root, "services")
	if s == nil || s.Kind != yaml.SequenceNode {
		s = &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq"}
		set(root, "services", s)
	}
	return s
}

// findService returns the index of the service named name in the services list, or -1.
func findService(list *yaml.Node, name string) int {
	for i, s := range list.Content {
		if n := get(s, "name"); n != nil && n.Kind == yaml.ScalarNode && n.Value == name {
			return i
		}
	}
	return -1
}

// findBackend returns the backend mapping of addr in a service node, and its index.
func findBackend(svc *yaml.Node, addr netip.Addr) (*yaml.Node, int) {
	list := get(svc, "backends")
	if list == nil || list.Kind != yaml.SequenceNode {
		return nil, -1
	}
	for i, b := range list.Content {
		if a := get(b, "address"); a != nil {
			if got, err := netip.ParseAddr(a.Value); err == nil && got == addr {
				return b, i
			}
		}
	}
	return nil, -1
}
