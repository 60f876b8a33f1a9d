package store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"

	"gopkg.in/yaml.v3"

	"github.com/manifoldlb/manifold/internal/config"
	"github.com/manifoldlb/manifold/internal/decode"
)

// A store need not be a file: the fleet keeps each service as a YAML document of its
// own in etcd, and edits them through the same code as the file's (one validation, the
// same errors), on a document composed of the node's own sections and the services.

// ServiceDoc is one service as a YAML document: the mapping a config file's services
// list holds, comments included (a drain's "undrain restores weight N").
type ServiceDoc struct {
	Name string
	YAML []byte
}

// Compose builds a config document from a node config file's own sections (node, bgp;
// not fleet, nor services) and the service documents, in the order given, parsed and
// validated by config.Parse as a whole. It returns the document as a store held in
// memory, edited by the same methods as a file's (PutService, Drain, …); its changes are
// never written anywhere: the caller takes ServiceDocs from them. A document's format
// version (a top-level v, config.ServiceDocVersion, which the fleet's reader checked)
// is no field of a service and stays out.
func Compose(file *Store, docs []ServiceDoc) (*Store, error) {
	data, _, _ := file.current()
	doc, err := parseTree(data)
	if err != nil {
		return nil, err
	}
	list := &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq"}
	for _, d := range docs {
		item, err := decode.YAML(d.YAML)
		if err != nil {
			return nil, fmt.Errorf("service %s: %w", d.Name, err)
		}
		if item.Kind != yaml.DocumentNode || len(item.Content) != 1 || item.Content[0].Kind != yaml.MappingNode {
			return nil, fmt.Errorf("service %s: not one YAML mapping", d.Name)
		}
		expandAliases(item)
		dropVersion(item.Content[0])
		list.Content = append(list.Content, item.Content[0])
	}
	// the composed document is the node's as it runs: its services are the fleet's, so
	// it names no fleet (a file may not have both)
	if holder, i := lookup(doc.Content[0], "fleet"); holder != nil {
		holder.Content = append(holder.Content[:i-1], holder.Content[i+1:]...)
	}
	set(doc.Content[0], "services", list)
	out, err := render(doc)
	if err != nil {
		return nil, err
	}
	cfg, root, err := config.ParseTree(file.path, out)
	if err != nil {
		return nil, err
	}
	return &Store{path: file.path, data: out, cfg: cfg, layout: layoutOf(root, out, cfg), memory: true}, nil
}

// dropVersion takes a service mapping's format version out.
func dropVersion(m *yaml.Node) {
	if holder, i := lookup(m, "v"); holder != nil {
		holder.Content = append(holder.Content[:i-1], holder.Content[i+1:]...)
	}
}

// SameService tells whether a service's document as the store has it (old) says what
// its document after an edit (ServiceDocs') says: the same bytes, or the same but for
// the format version, which an edit does not write (version 1 needs none).
func SameService(old, after []byte) bool {
	if bytes.Equal(old, after) {
		return true
	}
	doc, err := decode.YAML(old)
	if err != nil || len(doc.Content) != 1 || doc.Content[0].Kind != yaml.MappingNode {
		return false
	}
	if holder, _ := lookup(doc.Content[0], "v"); holder == nil {
		return false
	}
	expandAliases(doc)
	dropVersion(doc.Content[0])
	out, err := render(doc)
	return err == nil && bytes.Equal(out, after)
}

// ServiceDocs returns the services of a change as documents, in the order of its list.
func (ch *Change) ServiceDocs() ([]ServiceDoc, error) {
	doc, err := parseTree(ch.data)
	if err != nil {
		return nil, err
	}
	var out []ServiceDoc
	for _, item := range services(doc).Content {
		name := get(item, "name")
		if name == nil || name.Kind != yaml.ScalarNode {
			return nil, errors.New("a service without a name")
		}
		data, err := render(&yaml.Node{Kind: yaml.DocumentNode, Content: []*yaml.Node{item}})
		if err != nil {
			return nil, err
		}
		out = append(out, ServiceDoc{Name: name.Value, YAML: data})
	}
	return out, nil
}

// ServiceDocsOf returns the services of a file store as documents (for `manifold fleet
// import`).
func ServiceDocsOf(s *Store) ([]ServiceDoc, error) {
	data, cfg, _ := s.current()
	return (&Change{data: data, Config: cfg}).ServiceDocs()
}

// ExportSection renders service documents as the services section of a config file.
func ExportSection(docs []ServiceDoc) ([]byte, error) {
	list := &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq"}
	for _, d := range slices.Clone(docs) {
		item, err := decode.YAML(d.YAML)
		if err != nil || len(item.Content) != 1 {
			return nil, fmt.Errorf("service %s: not one YAML mapping", d.Name)
		}
		list.Content = append(list.Content, item.Content[0])
	}
	root := &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map", Content: []*yaml.Node{strNode("services"), list}}
	out, err := render(&yaml.Node{Kind: yaml.DocumentNode, Content: []*yaml.Node{root}})
	return out, err
}

type serviceKey struct{}

// ForService says that the edit made with ctx is of service name alone (the API's
// writes each name one). A store of many services kept apart (the fleet's) may then
// compose that service alone, run the edit on it, and check the result against the
// others itself (config.Clash), instead of composing and parsing them all. The file
// store needs no telling: each of its edits names its service, whose lines it
// splices into the file (splice.go).
func ForService(ctx context.Context, name string) context.Context {
	return context.WithValue(ctx, serviceKey{}, name)
}

// ServiceOf returns the service ForService named, if any.
func ServiceOf(ctx context.Context) (string, bool) {
	name, ok := ctx.Value(serviceKey{}).(string)
	return name, ok
}

// Unavailable is the error of a write that could not reach the store (the fleet's
// etcd): nothing was changed; the API answers 503.
func Unavailable(format string, args ...any) *Error {
	return fail(Unreachable, "", format, args...)
}
