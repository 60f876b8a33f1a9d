package wire

// The bodies of the API's small requests and responses: errors, the config file, a
// backend's weight.

// Error is the body of every error response.
type Error struct {
	Status  int    `json:"status"`
	Field   string `json:"field,omitempty"` // of the first problem
	Message string `json:"message"`         // of the first problem
	// Problems lists every problem (a service body may have several), the first one
	// included.
	Problems []Problem `json:"problems"`
}

// Problem is one thing wrong with a request: the field at fault ("" when it is not
// about one field) and what is wrong. store.Problem converts to it as is.
type Problem struct {
	Field   string `json:"field,omitempty"`
	Message string `json:"message"`
}

// ConfigView is the body of GET /api/v1/config.
type ConfigView struct {
	ConfigInfo
	YAML string `json:"yaml"` // the file as the node runs it, secrets redacted
}

// ConfigInfo identifies the config file the node runs.
type ConfigInfo struct {
	File     string `json:"file"`
	Revision string `json:"revision"` // SHA-256 of the file's contents
	// InSync is false when the file on disk was edited and not reloaded (SIGHUP):
	// API writes are refused until it is.
	InSync bool `json:"in_sync"`
}

// WeightRequest is the body of POST …/weight.
type WeightRequest struct {
	Weight uint32 `json:"weight"`
}
