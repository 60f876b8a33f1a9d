package config

import "gopkg.in/yaml.v3"

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
	var top map[string]yaml.Node
	if yaml.Unmarshal(data, &top) != nil {
		return NodeFile
	}
	if _, ok := top["backend"]; ok {
		return BackendFile
	}
	if _, ok := top["steer"]; ok {
		return SteerFile
	}
	if _, ok := top["link"]; ok {
		return LinkFile
	}
	if _, ok := top["edges"]; ok {
		return ConnectFile
	}
	return NodeFile
}
