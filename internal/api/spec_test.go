package api_test

import (
	"encoding/json"
	"fmt"
	"math"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/manifoldlb/manifold/internal/api"
	"github.com/manifoldlb/manifold/internal/api/wire"
	"github.com/manifoldlb/manifold/internal/config"
)

// serviceFields are the schema's rows of a service, by path below services[]:
// "health.interval", "backends[].weight".
func serviceFields() map[string]config.Field { return fieldsUnder("services[].") }

// fieldsUnder are the schema's rows below prefix, by the rest of their path.
func fieldsUnder(prefix string) map[string]config.Field {
	out := map[string]config.Field{}
	for _, f := range config.NodeSchema {
		if rest, ok := strings.CutPrefix(f.Path, prefix); ok {
			out[rest] = f
		}
	}
	return out
}

// yamlPaths lists the keys of a struct by their yaml tags, as paths like serviceFields'.
func yamlPaths(t reflect.Type, prefix string, out map[string]bool) {
	for f := range t.Fields() {
		key, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		path := prefix + key
		ft := f.Type
		if ft.Kind() == reflect.Slice && ft.Elem().Kind() == reflect.Struct {
			ft, path = ft.Elem(), path+"[]"
		}
		out[strings.TrimSuffix(path, "[]")] = true
		if ft.Kind() == reflect.Struct {
			yamlPaths(ft, path+".", out)
		}
	}
}

// ServiceSpec has a key for every key of a service in the config schema, and no other.
func TestServiceSpecKeysAreTheSchemas(t *testing.T) {
	have := map[string]bool{}
	yamlPaths(reflect.TypeFor[wire.ServiceSpec](), "", have)
	want := serviceFields()
	for p := range want {
		if !have[p] {
			t.Errorf("wire.ServiceSpec has no key %s of the config schema", p)
		}
	}
	for p := range have {
		if _, ok := want[p]; !ok {
			t.Errorf("wire.ServiceSpec has a key %s that the config schema has not", p)
		}
	}
}

// A ServiceSpec written as YAML parses back, with the config parser, into the service
// it shows: GET then PUT changes nothing.
func TestServiceSpecRoundTrip(t *testing.T) {
	med := uint32(50)
	svc := config.Service{
		Name: "web", VIP: netip.MustParseAddr("198.51.100.10"), Port: 8080, Protocol: config.UDP,
		Forwarding: config.NAT, GUEPort: 7000, BackendPort: 9090, Scheduler: config.MaglevSource, TableSize: 251,
		Origins:  []config.Origin{{Name: "us", Capacity: 200}},
		Backends: []config.Backend{{Address: netip.MustParseAddr("10.0.1.1"), Weight: 3, Origin: "us"}},
		Health: config.Health{Kind: config.HealthHTTP, Port: 8081, Path: "/ok", Interval: 2 * time.Second,
			Timeout: 1500 * time.Millisecond, Rise: 3, Fall: 4},
		BGP: config.ServiceBGP{Communities: []config.Community{65001<<16 | 200, 0xFFFFFF01},
			LargeCommunities: []config.LargeCommunity{{Global: 65001, Local1: 1, Local2: 3}}, MED: &med, Prepend: 2},
	}
	// Unless every field differs from its zero value and its default, a field the
	// spec forgets would come back equal anyway.
	for _, v := range []reflect.Value{reflect.ValueOf(svc), reflect.ValueOf(svc.Backends[0]), reflect.ValueOf(svc.Origins[0]), reflect.ValueOf(svc.Health), reflect.ValueOf(svc.BGP)} {
		for i := range v.NumField() {
			if name := v.Type().Field(i).Name; v.Field(i).IsZero() && name != "ProxyProtocol" && name != "Tunnel" && name != "Weight" { // a tunnel service's, a tunnelled origin's: below
				t.Fatalf("%s.%s is zero: give it a value", v.Type(), v.Type().Field(i).Name)
			}
		}
	}
	spec, err := yaml.Marshal([]wire.ServiceSpec{api.SpecOf(&svc)})
	if err != nil {
		t.Fatal(err)
	}
	var written []map[string]any
	if err := yaml.Unmarshal(spec, &written); err != nil {
		t.Fatal(err)
	}
	for path, f := range serviceFields() {
		if f.Default != "" && fmt.Sprint(valueAt(written[0], path)) == f.Default {
			t.Errorf("%s is its default %s: give it another value", path, f.Default)
		}
	}

	file := "node:\n  name: lb1\n  interfaces: [eth0]\n  address: 10.0.0.11\nservices:\n  " +
		strings.ReplaceAll(strings.TrimSpace(string(spec)), "\n", "\n  ") + "\n"
	cfg, err := config.Parse("spec.yaml", []byte(file))
	if err != nil {
		t.Fatalf("%v\n%s", err, file)
	}
	if len(cfg.Services) != 1 || !reflect.DeepEqual(cfg.Services[0], svc) {
		t.Errorf("parsed back:\n%+v\nwant\n%+v\nfrom\n%s", cfg.Services, svc, file)
	}

	// what only a tunnel service has
	tunnel := config.Service{Name: "home", VIP: netip.MustParseAddr("198.51.100.11"), Port: 443, Protocol: config.TCP,
		Forwarding: config.Tunnel, GUEPort: config.DefaultGUEPort, ProxyProtocol: config.ProxyV2, Scheduler: config.Maglev,
		TableSize: 1021, Health: config.Health{Kind: config.HealthNone, Port: 443, Interval: config.DefaultHealthInterval, Timeout: config.DefaultHealthTimeout,
			Rise: config.DefaultHealthRise, Fall: config.DefaultHealthFall}}
	if err := yaml.Unmarshal(must(yaml.Marshal([]wire.ServiceSpec{api.SpecOf(&tunnel)})), &written); err != nil {
		t.Fatal(err)
	}
	if _, ok := written[0]["backends"]; ok {
		t.Error("a tunnel service's spec shows backends, which the parser refuses of it")
	}
	if _, ok := written[0]["health"]; ok {
		t.Error("a tunnel service's spec shows a health check, which the parser refuses of it")
	}
	spec = must(yaml.Marshal(written))
	file = "node:\n  name: lb1\n  interfaces: [eth0]\n  address: 10.0.0.11\ntunnels: {cert_file: c, key_file: k, tokens_file: t}\nservices:\n  " +
		strings.ReplaceAll(strings.TrimSpace(string(spec)), "\n", "\n  ") + "\n"
	if cfg, err = config.Parse("spec.yaml", []byte(file)); err != nil {
		t.Fatalf("%v\n%s", err, file)
	}
	if len(cfg.Services) != 1 || !reflect.DeepEqual(cfg.Services[0], tunnel) {
		t.Errorf("parsed back:\n%+v\nwant\n%+v\nfrom\n%s", cfg.Services, tunnel, file)
	}

	// what only an origin reached by tunnel has, on a routed service
	mixed := svc
	mixed.Protocol, mixed.Origins = config.TCP, []config.Origin{svc.Origins[0], {Name: "home", Capacity: 50, Tunnel: true, Weight: 3}}
	spec = must(yaml.Marshal([]wire.ServiceSpec{api.SpecOf(&mixed)}))
	file = "node:\n  name: lb1\n  interfaces: [eth0]\n  address: 10.0.0.11\ntunnels: {cert_file: c, key_file: k, tokens_file: t}\nservices:\n  " +
		strings.ReplaceAll(strings.TrimSpace(string(spec)), "\n", "\n  ") + "\n"
	if cfg, err = config.Parse("spec.yaml", []byte(file)); err != nil {
		t.Fatalf("%v\n%s", err, file)
	}
	if len(cfg.Services) != 1 || !reflect.DeepEqual(cfg.Services[0], mixed) {
		t.Errorf("parsed back:\n%+v\nwant\n%+v\nfrom\n%s", cfg.Services, mixed, file)
	}
}

func must(b []byte, err error) []byte {
	if err != nil {
		panic(err)
	}
	return b
}

// valueAt reads the value at path ("backends[].weight": of the first item) of a
// decoded document.
func valueAt(doc map[string]any, path string) any {
	var v any = doc
	for _, key := range strings.Split(path, ".") {
		list := strings.HasSuffix(key, "[]")
		v = v.(map[string]any)[strings.TrimSuffix(key, "[]")]
		if list {
			v = v.([]any)[0]
		}
	}
	return v
}

// The OpenAPI document's schemas of the config file's objects (a service: the PUT body
// and the effective spec; a BGP peer: the PUT body) have the config schema's keys of
// that object, no others, with their types, values, ranges and defaults.
func TestOpenAPIConfigBodiesAreTheSchemas(t *testing.T) {
	schemas := documentSchemas[property](t)
	jsonType := map[config.FieldType]string{
		config.TypeString: "string", config.TypeDuration: "string", config.TypeAddress: "string", config.TypePrefix: "string",
		config.TypeEnum: "string", config.TypeInt: "integer", config.TypeBool: "boolean", config.TypeStrings: "array",
		config.TypeAddresses: "array", config.TypeList: "array", config.TypeMapping: "object",
	}
	for top, prefix := range map[string]string{"ServiceSpec": "services[].", "ServiceSpecEffective": "services[].", "PeerSpec": "bgp.peers[]."} {
		have := map[string]property{}
		schemas[top].walk(schemas, "", have)
		want := fieldsUnder(prefix)
		for path, f := range want {
			p, ok := have[path]
			if !ok {
				t.Errorf("%s: no property %s", top, path)
				continue
			}
			check := func(what string, got, want any) {
				if !reflect.DeepEqual(got, want) {
					t.Errorf("%s.%s: %s is %v, the config schema's %v", top, path, what, got, want)
				}
			}
			check("type", p.Type, jsonType[f.Type])
			check("enum", p.Enum, f.Enum)
			var lo, hi any
			if f.Type == config.TypeInt && f.Range != nil {
				lo, hi = float64(f.Range.Min), float64(f.Range.Max)
				if f.Range.Max == math.MaxInt64 {
					hi = nil
				}
			}
			check("minimum", p.Minimum, lo)
			check("maximum", p.Maximum, hi)
			var def any
			if p.Default != nil {
				def = fmt.Sprint(p.Default)
			}
			if f.Default != "" && !f.DefaultIf {
				check("default", def, f.Default)
			} else {
				check("default", def, nil)
			}
		}
		for path := range have {
			if _, ok := want[path]; !ok {
				t.Errorf("%s: property %s is not a key of a service in the config schema", top, path)
			}
		}
	}
}

// documentSchemas decodes the OpenAPI document's schemas, by name, as S.
func documentSchemas[S any](t *testing.T) map[string]S {
	t.Helper()
	var doc struct {
		Components struct{ Schemas map[string]S }
	}
	if err := json.Unmarshal(api.OpenAPI, &doc); err != nil {
		t.Fatal(err)
	}
	return doc.Components.Schemas
}

// property is a schema of the OpenAPI document, as far as the test compares it.
type property struct {
	Ref        string `json:"$ref"`
	Type       string
	Enum       []string
	Minimum    any
	Maximum    any
	Default    any
	Items      *property
	Properties map[string]property
}

// walk collects the properties below p (references followed) by path, as
// serviceFields names them.
func (p property) walk(schemas map[string]property, prefix string, out map[string]property) {
	for key, sub := range p.Properties {
		path := prefix + key
		item := sub
		if sub.Items != nil {
			item, path = *sub.Items, path+"[]"
		}
		if name, ok := strings.CutPrefix(item.Ref, "#/components/schemas/"); ok {
			item = schemas[name]
		}
		if sub.Ref != "" {
			sub.Type = item.Type // a reference stands for the schema it names
		}
		out[strings.TrimSuffix(path, "[]")] = sub
		if len(item.Properties) > 0 {
			item.walk(schemas, path+".", out)
		}
	}
}

// The values the node writes of a service's protocol, forwarding and scheduler (its
// status, its flows) and of a backend's state are those the document lists: the
// config schema's, and wire.BackendState's.
func TestOpenAPIStatusValuesAreTheSchemas(t *testing.T) {
	schemas := documentSchemas[property](t)
	service := serviceFields()
	states := []string{string(wire.BackendUp), string(wire.BackendDraining), string(wire.BackendDown)}
	for _, c := range []struct {
		schema, key string
		want        []string
	}{
		{"ServiceStatus", "protocol", service["protocol"].Enum},
		{"ServiceStatus", "forwarding", service["forwarding"].Enum},
		{"ServiceStatus", "scheduler", service["scheduler"].Enum},
		{"FlowStatus", "protocol", service["protocol"].Enum},
		{"BackendStatus", "state", states},
		{"BackendLoad", "state", states},
	} {
		if got := schemas[c.schema].Properties[c.key].Enum; !slices.Equal(got, c.want) {
			t.Errorf("%s.%s: enum %v, but the node writes %v", c.schema, c.key, got, c.want)
		}
	}
}
