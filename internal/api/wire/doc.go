// Package wire holds every type that crosses the wire between manifold's parts: the
// node API's request and response bodies (internal/api serves them; manifold ctl, the
// metrics, the status page and the lab decode them), the records the nodes and the
// steering controller keep as JSON in the fleet's etcd (NodeRecord, Steering), and the
// link's API (LinkStatus).
//
// It imports nothing of the project, and nothing but the standard library: a program
// that only speaks the API links no QUIC, YAML, etcd or Kubernetes client (a test
// checks), and a refactor inside a package that fills these types cannot change them.
// The packages that own the state convert to these types at their edge
// (internal/tunnel/wire.go, internal/steer/wire.go, api.SpecOf). The API's OpenAPI
// document (internal/api/openapi.json) is held to these types field by field, both
// ways, by internal/api's TestOpenAPIIsTheWireTypes.
package wire
