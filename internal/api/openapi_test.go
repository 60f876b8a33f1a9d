package api_test

import (
	"encoding/json"
	"go/ast"
	"go/parser"
	gotoken "go/token"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/manifoldlb/manifold/internal/api/wire"
)

// The OpenAPI document and the wire types are one description of the API, held equal
// by TestOpenAPIIsTheWireTypes: each schema of a body the node writes is a wire type,
// property for field, both ways. (The service's schemas are also held to the config
// schema, by TestOpenAPIConfigBodiesAreTheSchemas.)

// documented maps each schema of the document that the node writes to its wire type.
var documented = map[string]reflect.Type{
	"Status": reflect.TypeFor[wire.Status](), "Interface": reflect.TypeFor[wire.InterfaceStatus](),
	"BGPStatus": reflect.TypeFor[wire.BGPStatus](), "PeerStatus": reflect.TypeFor[wire.PeerStatus](),
	"ServiceStatus": reflect.TypeFor[wire.ServiceStatus](), "BackendStatus": reflect.TypeFor[wire.BackendStatus](),
	"BackendHealth": reflect.TypeFor[wire.BackendHealth](), "KubernetesState": reflect.TypeFor[wire.KubernetesState](),
	"FleetState":   reflect.TypeFor[wire.FleetState](),
	"FleetRefusal": reflect.TypeFor[wire.FleetRefusal](),

	"ServiceSpecEffective": reflect.TypeFor[wire.ServiceSpec](), "BackendSpecEffective": reflect.TypeFor[wire.BackendSpec](),
	"HealthSpecEffective": reflect.TypeFor[wire.HealthSpec](), "OriginSpec": reflect.TypeFor[wire.OriginSpec](),
	"BGPSpec": reflect.TypeFor[wire.BGPSpec](),

	"Config": reflect.TypeFor[wire.ConfigView](), "ConfigInfo": reflect.TypeFor[wire.ConfigInfo](),
	"Error": reflect.TypeFor[wire.Error](), "Problem": reflect.TypeFor[wire.Problem](),
	"WeightRequest": reflect.TypeFor[wire.WeightRequest](),

	"FleetStatus": reflect.TypeFor[wire.FleetStatus](), "FleetNode": reflect.TypeFor[wire.FleetNode](),
	"FleetPeer": reflect.TypeFor[wire.FleetPeer](), "ServiceLoad": reflect.TypeFor[wire.ServiceLoad](),
	"BackendLoad": reflect.TypeFor[wire.BackendLoad](), "OriginLoad": reflect.TypeFor[wire.OriginLoad](), "TunnelEdgeRecord": reflect.TypeFor[wire.TunnelEdgeRecord](),
	"RecordTotals": reflect.TypeFor[wire.RecordTotals](), "RecordTruncation": reflect.TypeFor[wire.RecordTruncation](),

	"SteeringStatus": reflect.TypeFor[wire.SteeringStatus](), "Steering": reflect.TypeFor[wire.Steering](),
	"SteeringDecision": reflect.TypeFor[wire.SteeringDecision](), "SteeringOrigin": reflect.TypeFor[wire.SteeringOrigin](),
	"SteeringSite": reflect.TypeFor[wire.SteeringSite](), "SteeringShare": reflect.TypeFor[wire.SteeringShare](),

	"TunnelsStatus": reflect.TypeFor[wire.TunnelsStatus](), "TunnelService": reflect.TypeFor[wire.TunnelService](),
	"Tunnel": reflect.TypeFor[wire.Tunnel](), "TunnelShare": reflect.TypeFor[wire.TunnelShare](),
	"TunnelCounters": reflect.TypeFor[wire.TunnelCounters](),

	"FlowsView": reflect.TypeFor[wire.FlowsView](), "FlowStatus": reflect.TypeFor[wire.FlowStatus](),
}

// Schemas of bodies the node reads with the config parser, not into a wire type: they
// are the config file's, and TestOpenAPIConfigBodiesAreTheSchemas holds them to its schema.
var parsedBodies = []string{"ServiceSpec", "BackendSpec", "HealthSpec", "PeerSpec"}

// Wire types that are no schema of the document, and why.
var undocumented = map[string]string{
	"NodeRecord": "a node's record in etcd; the API shows it inside FleetNode",
	"LinkStatus": "the link's own API (manifold link), not the node's",
	"LinkTunnel": "the link's own API (manifold link), not the node's",
}

// schema is a schema of the document, as far as the test compares it.
type schema struct {
	Ref                  string `json:"$ref"`
	Type                 string
	Properties           map[string]*schema
	Items                *schema
	AdditionalProperties json.RawMessage
	Required             []string
}

// jsonField is a field of a wire type as encoding/json writes it.
type jsonField struct {
	name     string
	typ      reflect.Type
	optional bool // omitempty or omitzero: absent when zero
}

// jsonFields lists t's fields under their JSON names, embedded structs' fields as the
// encoder promotes them.
func jsonFields(t reflect.Type) []jsonField {
	var out []jsonField
	for f := range t.Fields() {
		tag := f.Tag.Get("json")
		if !f.IsExported() || tag == "-" {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		if f.Anonymous && name == "" {
			out = append(out, jsonFields(f.Type)...)
			continue
		}
		if name == "" {
			name = f.Name
		}
		out = append(out, jsonField{name, f.Type, strings.Contains(opts, "omitempty") || strings.Contains(opts, "omitzero")})
	}
	return out
}

// TestOpenAPIIsTheWireTypes: every schema of the document is a wire type's or a body
// the config parser reads; each documented wire type's fields are its schema's
// properties, no more and no fewer, each of the JSON type the encoder writes (a
// struct: a reference to its type's schema), required unless omitted when empty; and
// every wire type is documented or says why not.
func TestOpenAPIIsTheWireTypes(t *testing.T) {
	schemas := documentSchemas[*schema](t)
	nameOf := map[reflect.Type]string{}
	for name, typ := range documented {
		nameOf[typ] = name
	}
	for name := range schemas {
		if _, ok := documented[name]; !ok && !slices.Contains(parsedBodies, name) {
			t.Errorf("openapi.json's schema %s is no wire type's: map it to one in documented", name)
		}
	}
	for name, typ := range documented {
		s, ok := schemas[name]
		if !ok {
			t.Errorf("openapi.json has no schema %s (wire.%s)", name, typ.Name())
			continue
		}
		compare(t, name, typ, s, nameOf)
	}
	for _, name := range wireStructs(t) {
		if _, ok := undocumented[name]; ok {
			continue
		}
		found := false
		for _, typ := range documented {
			found = found || typ.Name() == name
		}
		if !found {
			t.Errorf("wire.%s is in no schema of openapi.json: add one (and map it in documented), or say in undocumented why it has none", name)
		}
	}
}

// compare checks one wire type against its schema.
func compare(t *testing.T, name string, typ reflect.Type, s *schema, nameOf map[reflect.Type]string) {
	t.Helper()
	if s.Type != "object" {
		t.Errorf("%s: type %q, want object (wire.%s)", name, s.Type, typ.Name())
	}
	seen := map[string]bool{}
	for _, f := range jsonFields(typ) {
		seen[f.name] = true
		p, ok := s.Properties[f.name]
		if !ok {
			t.Errorf("%s has no property %s: wire.%s has it (%s)", name, f.name, typ.Name(), f.typ)
			continue
		}
		where := name + "." + f.name
		if problem := matches(f.typ, p, nameOf); problem != "" {
			t.Errorf("%s: %s", where, problem)
		}
		if required := slices.Contains(s.Required, f.name); required == f.optional {
			if required {
				t.Errorf("%s is required, but wire.%s omits it when empty", where, typ.Name())
			} else {
				t.Errorf("%s is not required, but wire.%s always writes it: list it in required", where, typ.Name())
			}
		}
	}
	for prop := range s.Properties {
		if !seen[prop] {
			t.Errorf("%s has a property %s that wire.%s has not: the node never writes it", name, prop, typ.Name())
		}
	}
	for _, r := range s.Required {
		if !seen[r] {
			t.Errorf("%s requires %s, which wire.%s has not", name, r, typ.Name())
		}
	}
}

// matches says how p is not the schema of a value of Go type typ as encoding/json
// writes it ("" when it is).
func matches(typ reflect.Type, p *schema, nameOf map[reflect.Type]string) string {
	for typ.Kind() == reflect.Pointer {
		typ = typ.Elem()
	}
	want := ""
	switch {
	case typ == reflect.TypeFor[time.Time]():
		want = "string"
	case typ.Kind() == reflect.Struct:
		name, ok := nameOf[typ]
		if !ok {
			return "wire." + typ.Name() + " has no schema of its own in documented"
		}
		if p.Ref != "#/components/schemas/"+name {
			return "is " + describe(p) + ", want a reference to " + name + " (wire." + typ.Name() + ")"
		}
		return ""
	case typ.Kind() == reflect.String:
		want = "string"
	case typ.Kind() == reflect.Bool:
		want = "boolean"
	case typ.Kind() >= reflect.Int && typ.Kind() <= reflect.Uint64:
		want = "integer"
	case typ.Kind() == reflect.Float32 || typ.Kind() == reflect.Float64:
		want = "number"
	case typ.Kind() == reflect.Slice:
		if p.Type != "array" || p.Items == nil {
			return "is " + describe(p) + ", want an array (" + typ.String() + ")"
		}
		if problem := matches(typ.Elem(), p.Items, nameOf); problem != "" {
			return "items: " + problem
		}
		return ""
	case typ.Kind() == reflect.Map:
		var values schema
		if p.Type != "object" || json.Unmarshal(p.AdditionalProperties, &values) != nil || values.Ref+values.Type == "" {
			return "is " + describe(p) + ", want an object with additionalProperties of its values (" + typ.String() + ")"
		}
		if problem := matches(typ.Elem(), &values, nameOf); problem != "" {
			return "values: " + problem
		}
		return ""
	default:
		return "a field of type " + typ.String() + ": the test knows no JSON type for it"
	}
	if p.Type != want || p.Ref != "" {
		return "is " + describe(p) + ", want " + want + " (" + typ.String() + ")"
	}
	return ""
}

func describe(p *schema) string {
	if p.Ref != "" {
		return "a reference to " + strings.TrimPrefix(p.Ref, "#/components/schemas/")
	}
	if p.Type == "" {
		return "of no type"
	}
	return p.Type
}

// wireStructs lists the struct types the wire package declares, from its source.
func wireStructs(t *testing.T) []string {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join("wire", "*.go"))
	var out []string
	for _, path := range files {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(gotoken.NewFileSet(), path, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			gd, ok := d.(*ast.GenDecl)
			if !ok || gd.Tok != gotoken.TYPE {
				continue
			}
			for _, spec := range gd.Specs {
				ts := spec.(*ast.TypeSpec)
				if _, isStruct := ts.Type.(*ast.StructType); isStruct && ts.Name.IsExported() {
					out = append(out, ts.Name.Name)
				}
			}
		}
	}
	if len(out) < 20 {
		t.Fatalf("read %d struct types from internal/api/wire: not the package", len(out))
	}
	return out
}
