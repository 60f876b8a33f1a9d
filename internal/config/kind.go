package config

import "gopkg.in/yaml.v3"

// IsBackendFile tells a backend agent file (top-level key `backend`) from a node file,
// so that `manifold validate` checks either without being told which.
func IsBackendFile(data []byte) bool {
	var top map[string]yaml.Node
	if yaml.Unmarshal(data, &top) != nil {
		return false
	}
	_, ok := top["backend"]
	return ok
}
