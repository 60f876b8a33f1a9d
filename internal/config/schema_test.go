package config

import (
	"errors"
	"math"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"
)

// line is one key of a rendered file: its value ("" for a mapping or a list, whose
// keys follow) and a comment.
type line struct{ path, value, comment string }

// render writes lines (in schema order) as a YAML file, adding the mappings and lists
// that hold them, with one item per list. Comments start at column col, or two spaces
// after a longer line.
func render(lines []line, col int) string {
	var b strings.Builder
	written := map[string]bool{}
	itemStarted := map[string]bool{}
	var write func(l line)
	write = func(l line) {
		if written[l.path] {
			return
		}
		written[l.path] = true
		parent := parentPath(l.path)
		if parent != "" {
			write(line{path: strings.TrimSuffix(parent, "[]")})
		}
		indent := 0
		segs := strings.Split(l.path, ".")
		for _, seg := range segs[:len(segs)-1] {
			indent += 2
			if strings.HasSuffix(seg, "[]") {
				indent += 2
			}
		}
		text := strings.Repeat(" ", indent)
		if strings.HasSuffix(parent, "[]") && !itemStarted[parent] {
			itemStarted[parent] = true
			text = strings.Repeat(" ", indent-2) + "- "
		}
		f := fields[l.path]
		text += f.key() + ":"
		if l.value != "" {
			text += " " + l.value
		}
		if l.comment != "" {
			text += strings.Repeat(" ", max(2, col-len(text))) + "# " + l.comment
		}
		b.WriteString(text + "\n")
	}
	for _, l := range lines {
		write(l)
	}
	return b.String()
}

// file renders a file of schema with the given values (field path → value as written),
// in schema order.
func file(schema []Field, values map[string]string) string {
	var lines []line
	for _, f := range schema {
		if v, ok := values[f.Path]; ok {
			lines = append(lines, line{path: f.Path, value: v})
		}
	}
	return render(lines, 0)
}

// minimal gives the required keys of schema their example values: the smallest valid
// file that has every section, one item in every list — but fleet, which a file has
// instead of services (minimalFor).
func minimal(schema []Field) map[string]string {
	values := map[string]string{}
	for _, f := range schema {
		// the node's file has fleet instead of services; the controller's always has it
		if f.Required && f.Type != TypeMapping && f.Type != TypeList && (!under(f.Path, "fleet") || &schema[0] == &SteerSchema[0]) {
			values[f.Path] = f.Example
		}
	}
	// the minimal service has an origin (its list has one item), so its backend names it
	if _, ok := values["services[].origins[].name"]; ok {
		values["services[].backends[].origin"] = fields["services[].backends[].origin"].Example
	}
	return values
}

// minimalFor is the minimal file in which the field at path can stand: for a key of
// the fleet section, a file with the fleet's required keys and no services.
func minimalFor(schema []Field, path string) map[string]string {
	values := minimal(schema)
	if path == "services[].backend_port" {
		values["services[].forwarding"] = string(NAT) // refused with any other
	}
	if path == "services[].proxy_protocol" { // refused but on a tunnel service, which has no backends
		values["services[].forwarding"] = string(Tunnel)
		for p := range values {
			if under(p, "services[].backends") {
				delete(values, p)
			}
		}
	}
	if path == "services[].origins[].weight" { // refused but on a tunnel origin, which has no backends
		values["services[].origins[].tunnel"] = "true"
		values["services[].port"] = "443"
		for p := range values {
			if under(p, "services[].backends") {
				delete(values, p)
			}
		}
	}
	if under(path, "kubernetes") {
		// the section has no required key: its kubeconfig stands for it
		values["kubernetes.kubeconfig"] = fields["kubernetes.kubeconfig"].Example
	}
	if !under(path, "fleet") {
		return values
	}
	for p := range values {
		if under(p, "services") {
			delete(values, p)
		}
	}
	for _, f := range schema {
		if f.Required && f.Type != TypeMapping && f.Type != TypeList && under(f.Path, "fleet") {
			values[f.Path] = f.Example
		}
	}
	return values
}

func under(path, section string) bool {
	return path == section || strings.HasPrefix(path, section+".") || strings.HasPrefix(path, section+"[]")
}

// parse parses a file of schema, returning the model and the errors.
func parse(schema []Field, values map[string]string) (any, error) {
	data := []byte(file(schema, values))
	switch &schema[0] {
	case &BackendSchema[0]:
		return ParseBackend("t.yaml", data)
	case &SteerSchema[0]:
		return ParseSteer("t.yaml", data)
	case &LinkSchema[0]:
		return ParseLink("t.yaml", data)
	}
	return Parse("t.yaml", data)
}

// concrete is the path of a field in a file with one item per list.
func concrete(path string) string { return strings.ReplaceAll(path, "[]", "[0]") }

// problemAt returns the message of err about the field at path, or "".
func problemAt(err error, path string) string {
	var errs Errors
	if !errors.As(err, &errs) {
		return ""
	}
	for _, e := range errs {
		if e.Field == path {
			return e.Msg
		}
	}
	return ""
}

func with(values map[string]string, more ...string) map[string]string {
	out := map[string]string{}
	for k, v := range values {
		out[k] = v
	}
	for i := 0; i+1 < len(more); i += 2 {
		out[more[i]] = more[i+1]
	}
	return out
}

var schemas = map[string][]Field{"node": NodeSchema, "backend": BackendSchema, "steer": SteerSchema, "link": LinkSchema}

func TestMinimalFilesParse(t *testing.T) {
	for name, schema := range schemas {
		if _, err := parse(schema, minimal(schema)); err != nil {
			t.Errorf("%s: the minimal file of the schema's required keys does not parse:\n%s\n%v", name, file(schema, minimal(schema)), err)
		}
	}
	fleet := minimalFor(NodeSchema, "fleet")
	c, err := parse(NodeSchema, fleet)
	if err != nil {
		t.Fatalf("the minimal fleet file does not parse:\n%s\n%v", file(NodeSchema, fleet), err)
	}
	if cfg := c.(*Config); cfg.Fleet == nil || len(cfg.Services) != 0 || cfg.Fleet.Prefix != DefaultFleetPrefix {
		t.Errorf("minimal fleet file: %+v", cfg.Fleet)
	}
	// both fleet and services: refused, saying how to move the services
	_, err = parse(NodeSchema, with(fleet, "services[].name", "web", "services[].vip", "198.51.100.10"))
	if msg := problemAt(err, "services"); !strings.Contains(msg, "manifold fleet import") {
		t.Errorf("a file with fleet and services: %v", err)
	}
}

// A file that writes a field's schema default parses into the same model as a file that
// leaves it out: applyDefaults and the schema agree.
func TestDefaultsAreTheSchemas(t *testing.T) {
	// keys a default depends on
	context := map[string][]string{
		"services[].health.path": {"services[].health.kind", "http", "services[].health.port", "80"},
		// the bfd mapping's defaults fill only a bfd mapping that is there
		"bgp.peers[].bfd.min_rx":     {"bgp.peers[].bfd.min_tx", "300ms"},
		"bgp.peers[].bfd.min_tx":     {"bgp.peers[].bfd.min_rx", "300ms"},
		"bgp.peers[].bfd.multiplier": {"bgp.peers[].bfd.min_rx", "300ms"},
	}
	defaults := 0
	for _, schema := range schemas {
		for _, f := range schema {
			if f.Default == "" {
				continue
			}
			defaults++
			absent := with(minimalFor(schema, f.Path), context[f.Path]...)
			given := with(absent, f.Path, f.Default)
			want, err := parse(schema, absent)
			if err != nil {
				t.Fatalf("%s: %v", f.Path, err)
			}
			got, err := parse(schema, given)
			if err != nil {
				t.Errorf("%s: %s, the schema's default, is refused: %v", f.Path, f.Default, err)
				continue
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("%s: left out, it is not the schema's default %s:\nleft out: %+v\n%s: %+v", f.Path, f.Default, want, f.Default, got)
			}
		}
	}
	if defaults < 20 {
		t.Errorf("only %d defaults in the schema", defaults)
	}
}

// Every bounded field accepts its bounds and refuses the values just outside them,
// naming the field.
func TestBoundsAreTheSchemas(t *testing.T) {
	for _, schema := range schemas {
		for _, f := range schema {
			if f.Range == nil {
				continue
			}
			write := func(v int64) string {
				if f.Type == TypeDuration {
					return time.Duration(v).String()
				}
				return strconv.FormatInt(v, 10)
			}
			check := func(v int64, ok bool) {
				_, err := parse(schema, with(minimalFor(schema, f.Path), f.Path, write(v)))
				switch {
				case ok && err != nil:
					t.Errorf("%s: %s refused: %v", f.Path, write(v), err)
				case !ok && problemAt(err, concrete(f.Path)) == "":
					t.Errorf("%s: %s not refused with an error naming the field: %v", f.Path, write(v), err)
				}
			}
			check(f.Range.Min, true)
			check(f.Range.Min-1, false)
			if f.OrZero {
				check(0, true)
			}
			if f.Range.Max != math.MaxInt64 {
				check(f.Range.Max, true)
				check(f.Range.Max+1, false)
			}
		}
	}
}

// Every key of the schema is accepted and read by the parser: a value of the wrong type
// is refused, naming the field (a key accepted but not read would pass silently).
func TestEveryKeyIsRead(t *testing.T) {
	for _, schema := range schemas {
		for _, f := range schema {
			values := map[string]string{}
			for p, v := range minimalFor(schema, f.Path) {
				if !strings.HasPrefix(p, f.Path+".") && !strings.HasPrefix(p, f.Path+"[].") {
					values[p] = v
				}
			}
			wrong := "{x: 1}"
			if f.Type == TypeMapping {
				wrong = "[1]"
			}
			values[f.Path] = wrong
			_, err := parse(schema, values)
			if msg := problemAt(err, concrete(f.Path)); msg == "" || strings.HasPrefix(msg, "unknown field") {
				t.Errorf("%s: %s is not refused as a value of the wrong type: %v", f.Path, wrong, err)
			}
		}
	}
}

// Every field that names a file says what it holds, so that `manifold validate` checks
// it (Validate): a new *_file field without its kind would go unchecked.
func TestFileFieldsSayWhatTheyHold(t *testing.T) {
	for _, schema := range [][]Field{NodeSchema, BackendSchema, SteerSchema, LinkSchema} {
		for _, f := range schema {
			named := strings.HasSuffix(f.Path, "_file") || strings.HasSuffix(f.Path, ".kubeconfig")
			if named != (f.File != NoFile) {
				t.Errorf("%s: File %v: a field whose name ends in _file (or kubeconfig) names a file, and only it", f.Path, f.File)
			}
		}
	}
}
