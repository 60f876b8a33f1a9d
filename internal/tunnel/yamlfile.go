package tunnel

// The tunnel's two small files (the edge's tokens file, the connector's config) are
// read here field by field from the YAML tree, so that every problem names its field
// and line as internal/config does (FILE:LINE: field: message), and so that a secret
// never ends up in an error message (a decoder's type errors quote the value).

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/manifoldlb/manifold/internal/config"
	"github.com/manifoldlb/manifold/internal/decode"
	"github.com/manifoldlb/manifold/internal/secretfile"
)

// yamlFile collects the problems of one file.
type yamlFile struct {
	name string
	errs config.Errors
	log  *slog.Logger // where readSecret warns; nil: nowhere
}

func (y *yamlFile) add(line int, field, format string, args ...any) {
	y.errs = append(y.errs, &config.Error{File: y.name, Line: line, Field: field, Msg: fmt.Sprintf(format, args...)})
}

func (y *yamlFile) err() error {
	if len(y.errs) == 0 {
		return nil
	}
	slices.SortStableFunc(y.errs, func(a, b *config.Error) int { return a.Line - b.Line })
	return y.errs
}

// readFile reads a file a config names; a problem is reported against field.
func (y *yamlFile) readFile(line int, field, path string) ([]byte, bool) {
	return y.read(line, field, path, decode.ReadFile)
}

// readSecret is readFile for a file that holds a secret: bounded in size, with a
// warning on y.log when others than its owner may read it.
func (y *yamlFile) readSecret(line int, field, path string) ([]byte, bool) {
	return y.read(line, field, path, func(path string) ([]byte, error) { return secretfile.Read(path, y.log) })
}

func (y *yamlFile) read(line int, field, path string, read func(string) ([]byte, error)) ([]byte, bool) {
	data, err := read(path)
	if err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		y.add(line, field, "cannot read %s: %v", path, err)
		return nil, false
	}
	return data, true
}

// document returns the top node of the file, or nil (reported) when it has none. The
// file is bounded by package decode (size, depth, aliases).
func (y *yamlFile) document(data []byte) *yaml.Node {
	doc, err := decode.YAML(data)
	var de *decode.Error
	switch {
	case errors.Is(err, io.EOF):
		y.add(0, "", "the file is empty")
		return nil
	case errors.As(err, &de):
		y.add(de.Line, "", "%s", de.Msg)
		return nil
	case err != nil:
		y.add(0, "", "%s", strings.TrimPrefix(err.Error(), "yaml: "))
		return nil
	}
	if len(doc.Content) == 0 {
		y.add(0, "", "the file is empty")
		return nil
	}
	return doc.Content[0]
}

// mapping returns the fields of a mapping by key; unknown and repeated keys are errors.
func (y *yamlFile) mapping(n *yaml.Node, path string, keys ...string) (map[string]*yaml.Node, bool) {
	if n.Kind != yaml.MappingNode {
		y.add(n.Line, path, "must be a mapping with the keys %s", strings.Join(keys, ", "))
		return nil, false
	}
	fields := map[string]*yaml.Node{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		field := join(path, k.Value)
		switch {
		case !slices.Contains(keys, k.Value):
			y.add(k.Line, field, "unknown field (known: %s)", strings.Join(keys, ", "))
		case fields[k.Value] != nil:
			y.add(k.Line, field, "given twice")
		default:
			fields[k.Value] = v
		}
	}
	return fields, true
}

func (y *yamlFile) sequence(n *yaml.Node, path string) ([]*yaml.Node, bool) {
	if n.Kind != yaml.SequenceNode {
		y.add(n.Line, path, "must be a list")
		return nil, false
	}
	return n.Content, true
}

// list returns the items of a list that must have at least one (of what).
func (y *yamlFile) list(n *yaml.Node, path, what string) []*yaml.Node {
	items, ok := y.sequence(n, path)
	if ok && len(items) == 0 {
		y.add(n.Line, path, "must list at least one %s", what)
	}
	return items
}

// text returns a scalar's text. It never quotes the value, which may be a secret.
func (y *yamlFile) text(n *yaml.Node, path string) (string, bool) {
	if n.Kind != yaml.ScalarNode || n.Tag == "!!null" {
		y.add(n.Line, path, "must be a string")
		return "", false
	}
	return n.Value, true
}

func (y *yamlFile) integer(n *yaml.Node, path string, lo, hi int) (int, bool) {
	s, ok := y.text(n, path)
	if !ok {
		return 0, false
	}
	v, err := strconv.Atoi(s)
	if err != nil || v < lo || v > hi {
		y.add(n.Line, path, "%q is not an integer from %d to %d", s, lo, hi)
		return 0, false
	}
	return v, true
}

func (y *yamlFile) duration(n *yaml.Node, path string, lo, hi time.Duration) (time.Duration, bool) {
	s, ok := y.text(n, path)
	if !ok {
		return 0, false
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < lo || d > hi {
		y.add(n.Line, path, "%q is not a duration from %s to %s (e.g. 30s)", s, lo, hi)
		return 0, false
	}
	return d, true
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func index(path string, i int) string { return fmt.Sprintf("%s[%d]", path, i) }
