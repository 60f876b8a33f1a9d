package config

import (
	"gopkg.in/yaml.v3"

	"github.com/manifoldlb/manifold/internal/decode"
)

// Kind is the kind of a config file, told by its top-level keys, so that `manifold
// validate` checks any of them without being told which.
type Kind string

const (
	NodeFile    Kind = "node"    // manifold run
	BackendFile Kind = "backend" // manifold backend: top-level `backend`
	SteerFile   Kind = "steer"   // manifold steer: top-level `steer`
	LinkFile    Kind = "link"    // manifold link: top-level `link`
	ConnectFile Kind = "connect" // manifold connect: top-level `edges` (internal/tunnel parses it)
)

// KindOf tells the kind of a config file; a file that is not YAML is taken for a node
// file (whose parser then says what is wrong with it).
func KindOf(data []byte) Kind {
	doc, err := decode.YAML(data)
	if err != nil || len(doc.Content) != 1 || doc.Content[0].Kind != yaml.MappingNode {
		return NodeFile
	}
	top := map[string]bool{}
	for i, k := range doc.Content[0].Content {
		if i%2 == 0 && k.Kind == yaml.ScalarNode {
			top[k.Value] = true
		}
	}
	switch {
	case top["backend"]:
		return BackendFile
	case top["steer"]:
		return SteerFile
	case top["link"]:
		return LinkFile
	case top["edges"]:
		return ConnectFile
	}
	return NodeFile
}
