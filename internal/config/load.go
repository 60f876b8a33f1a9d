package config

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"gopkg.in/yaml.v3"

	"github.com/manifoldlb/manifold/internal/decode"
)

// Load reads and parses the config file of `manifold run`.
func Load(path string) (*Config, error) {
	return load(path, Parse)
}

// Parse parses and validates a config file of `manifold run`. file is used only in
// error messages. On any problem it returns nil and an Errors listing all of them.
func Parse(file string, data []byte) (*Config, error) {
	c, _, err := parseNode(newParser(file), data)
	return c, err
}

// ParseTree is Parse that also returns the file's top-level mapping as decoded, with
// the lines and columns of its nodes: the store edits one service of the file in place
// from where its node is, instead of rendering and parsing the whole file again.
func ParseTree(file string, data []byte) (*Config, *yaml.Node, error) {
	return parseNode(newParser(file), data)
}

func parseNode(p *parser, data []byte) (*Config, *yaml.Node, error) {
	root := p.document(data, strings.Join(keysOf(NodeSchema, ""), ", "))
	if root == nil {
		return nil, nil, p.errs.sorted()
	}
	c := p.config(root)
	applyDefaults(c, p.present)
	p.validateConfig(c)
	if err := p.errs.sorted(); err != nil {
		return nil, nil, err
	}
	return c, root, nil
}

// ServiceDocVersion is the format of a service document in the fleet store. A
// document says its version with a top-level `v:` or not at all (version 1, the
// format of every release before the field); a node refuses a document of a version it
// does not read, that service alone.
const ServiceDocVersion = 1

// ParseService parses, defaults and validates one service document: the mapping a
// config file's services list holds (the fleet store keeps each service as one), with
// the same walkers, defaults and checks as Parse. node is the config of the node that
// runs it (its addresses and tunnels section matter to a service; its services do not:
// what holds between services is Clash's). file names the document in errors, whose
// fields are the service's own (backends[0].address).
func ParseService(file string, data []byte, node *Config) (*Service, error) {
	svc, err := parseService(file, data, node, true)
	if err != nil {
		errs := err.(Errors)
		for _, e := range errs {
			e.Field = strings.TrimPrefix(strings.TrimPrefix(e.Field, oneService), ".")
		}
		return nil, errs
	}
	return svc, nil
}

// oneService is where ParseService and ParseFileService put the service they parse.
const oneService = "services[0]"

// ParseFileService parses, defaults and validates one service of a config file (a
// mapping of its services list, no format version) within the node's config, with
// Parse's errors for a file whose services list holds that service alone: fields and
// messages say services[0]. The checks between services are Fits'.
func ParseFileService(file string, data []byte, node *Config) (*Service, error) {
	return parseService(file, data, node, false)
}

// parseService is ParseService (doc: a fleet document, which may say its format
// version) and ParseFileService.
func parseService(file string, data []byte, node *Config, doc bool) (*Service, error) {
	p := newParser(file)
	root := p.document(data, strings.Join(keysOf(NodeSchema, "services[]"), ", "))
	if root == nil {
		return nil, p.errs.sorted()
	}
	if doc && !p.docVersion(root) {
		return nil, p.errs.sorted()
	}
	const sp = oneService
	c := &Config{Node: node.Node, BGP: node.BGP, Tunnels: node.Tunnels, Kubernetes: node.Kubernetes, Services: make([]Service, 1)}
	p.lines["services"], p.lines[sp] = root.Line, root.Line
	p.service(root, sp, &c.Services[0])
	applyServiceDefaults(&c.Services[0], sp, p.present)
	p.validateService(c, &c.Services[0], sp)
	if err := p.errs.sorted(); err != nil {
		return nil, err
	}
	return &c.Services[0], nil
}

// docVersion takes a service document's `v:` out of its mapping and reports whether
// this release reads that version.
func (p *parser) docVersion(root *yaml.Node) bool {
	for i := 0; i+1 < len(root.Content); i += 2 {
		if root.Content[i].Value != "v" {
			continue
		}
		v := root.Content[i+1]
		if n, err := strconv.Atoi(v.Value); err != nil || v.Kind != yaml.ScalarNode || n < 1 {
			p.add(v.Line, "v", "the document's format version must be a positive integer, not %s", quote(v.Value))
			return false
		} else if n > ServiceDocVersion {
			p.add(v.Line, "v", "format version %d is newer than this node reads (%d): upgrade the node; it keeps this service's last good state meanwhile", n, ServiceDocVersion)
			return false
		}
		root.Content = append(root.Content[:i:i], root.Content[i+2:]...)
		return true
	}
	return true
}

// LoadSteer reads and parses the config file of `manifold steer --config`.
func LoadSteer(path string) (*Steer, error) {
	return load(path, ParseSteer)
}

// ParseSteer parses and validates a config file of `manifold steer --config`. file is
// used only in error messages.
func ParseSteer(file string, data []byte) (*Steer, error) {
	return parseSteer(newParser(file), data)
}

func parseSteer(p *parser, data []byte) (*Steer, error) {
	root := p.document(data, strings.Join(keysOf(SteerSchema, ""), ", "))
	if root == nil {
		return nil, p.errs.sorted()
	}
	s := &Steer{}
	p.mapping(root, "", keysOf(SteerSchema, ""), func(key, path string, v *yaml.Node) {
		switch key {
		case "fleet":
			p.fleet(v, path, &s.Fleet)
		case "steer":
			p.mapping(v, path, keysOf(SteerSchema, "steer"), func(key, path string, v *yaml.Node) {
				switch key {
				case "name":
					s.Name, _ = p.str(v, path)
				case "interval":
					s.Interval, _ = p.duration(v, path)
				case "lease":
					s.Lease, _ = p.duration(v, path)
				case "metrics":
					s.Metrics, _ = p.str(v, path)
				}
			})
		}
	})
	applySteerDefaults(s, p.present, os.Hostname)
	p.validateSteer(s)
	if err := p.errs.sorted(); err != nil {
		return nil, err
	}
	return s, nil
}

// LoadBackend reads and parses the config file of `manifold backend`.
func LoadBackend(path string) (*BackendAgent, error) {
	return load(path, ParseBackend)
}

// ParseBackend parses and validates a config file of `manifold backend`. file is used
// only in error messages. On any problem it returns nil and an Errors listing all of them.
func ParseBackend(file string, data []byte) (*BackendAgent, error) {
	return parseBackend(newParser(file), data)
}

func parseBackend(p *parser, data []byte) (*BackendAgent, error) {
	root := p.document(data, strings.Join(keysOf(BackendSchema, ""), ", "))
	if root == nil {
		return nil, p.errs.sorted()
	}
	a := p.backendFile(root)
	applyBackendDefaults(a, p.present, os.Hostname)
	p.validateBackend(a)
	if err := p.errs.sorted(); err != nil {
		return nil, err
	}
	return a, nil
}

// load reads a config file (of at most decode.MaxFileSize bytes) and hands it to its
// parser.
func load[T any](path string, parse func(file string, data []byte) (T, error)) (T, error) {
	data, err := decode.ReadFile(path)
	if err != nil {
		var zero T
		return zero, readError(path, err)
	}
	return parse(path, data)
}

func readError(path string, err error) error {
	msg := err.Error()
	var pe *fs.PathError
	if errors.As(err, &pe) {
		msg = pe.Err.Error()
	}
	return Errors{{File: path, Msg: msg, err: err}}
}

// parser walks a yaml.Node tree against the schema, filling the model and collecting
// every problem. It remembers where each field was (lines) and which fields were
// present in the file, so that defaults.go only fills absent fields and validate.go
// can point at the right line.
type parser struct {
	file  string
	errs  Errors
	lines map[string]int  // field path → line of its value, for every field present (not null)
	bad   map[string]bool // field path → its value was rejected while parsing
	// checkFiles: each file the config names is checked as it is read (Validate);
	// files: those that passed, by field
	checkFiles bool
	files      map[string]namedFile
}

// maxMergeDepth bounds nested merge keys (<<), which may also be cyclic.
const maxMergeDepth = 16

func newParser(file string) *parser {
	return &parser{file: file, lines: map[string]int{}, bad: map[string]bool{}}
}

func (p *parser) add(line int, field, format string, args ...any) {
	p.errs = append(p.errs, &Error{File: p.file, Line: line, Field: field, Msg: fmt.Sprintf(format, args...)})
}

// fail reports a problem with the value at path and marks the value as rejected, so
// that no default replaces it and no later check trips over it again.
func (p *parser) fail(n *yaml.Node, path, format string, args ...any) {
	p.bad[path] = true
	p.add(n.Line, path, format, args...)
}

// present reports whether the field at path was given in the file (null counts as
// absent), whether or not its value was valid.
func (p *parser) present(path string) bool {
	_, ok := p.lines[path]
	return ok
}

// usable reports whether the field at path and every field enclosing it were either
// absent or valid: the value in the model can be trusted for cross-field checks.
func (p *parser) usable(path string) bool {
	for {
		if p.bad[path] {
			return false
		}
		if path == "" {
			return true
		}
		path = parentPath(path)
	}
}

// line returns the line of the field at path, or when it is absent the line of the
// closest enclosing mapping or list that is present.
func (p *parser) line(path string) int {
	for {
		if l, ok := p.lines[path]; ok {
			return l
		}
		if path == "" {
			return 0
		}
		path = parentPath(path)
	}
}

// parentPath strips the last component from a field path: "a.b[1].c" → "a.b[1]" →
// "a.b" → "a" → "".
func parentPath(path string) string {
	i := strings.LastIndexAny(path, ".[")
	if i < 0 {
		return ""
	}
	return path[:i]
}

var syntaxLine = regexp.MustCompile(`^yaml: line (\d+): `)

// document decodes data into its single YAML document and returns the top-level
// mapping, or nil after reporting why there is none. keys lists the accepted top-level
// keys, for the message. The document is bounded by package decode (size, depth,
// aliases), so the walk that follows visits at most decode.MaxAliasNodes more nodes
// than the file holds, however it uses aliases and merge keys.
func (p *parser) document(data []byte, keys string) (root *yaml.Node) {
	if err := decode.Size(data, decode.MaxFileSize); err != nil {
		p.add(0, "", "%v", err)
		return nil
	}
	dec := decode.NewDecoder(data)
	doc, err := dec.Next()
	if err != nil {
		if err == io.EOF {
			p.add(0, "", "empty file")
		} else {
			p.decodeError(err)
		}
		return nil
	}
	for {
		extra, err := dec.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			p.decodeError(err)
			return nil
		}
		if c := docContent(extra); c != nil && !isNull(c) {
			p.add(c.Line, "", "only one yaml document is allowed (found a second one)")
			return nil
		}
	}
	root = docContent(doc)
	if root == nil || isNull(root) {
		p.add(0, "", "empty file")
		return nil
	}
	if root.Kind != yaml.MappingNode {
		p.add(root.Line, "", "top level must be a mapping with keys %s, got %s", keys, kindName(root))
		return nil
	}
	return root
}

// decodeError reports an error of package decode: a bound exceeded, or yaml.v3's syntax
// error.
func (p *parser) decodeError(err error) {
	var de *decode.Error
	if errors.As(err, &de) {
		p.add(de.Line, "", "%s", de.Msg)
		return
	}
	p.syntax(err)
}

func docContent(doc *yaml.Node) *yaml.Node {
	if doc.Kind == yaml.DocumentNode {
		if len(doc.Content) == 0 {
			return nil
		}
		return resolve(doc.Content[0])
	}
	return resolve(doc)
}

// syntax reports a yaml.v3 error, with the line it gives when it gives one.
func (p *parser) syntax(err error) {
	msg := err.Error()
	line := 0
	if m := syntaxLine.FindStringSubmatch(msg); m != nil {
		line, _ = strconv.Atoi(m[1])
		msg = msg[len(m[0]):]
	} else {
		msg = strings.TrimPrefix(msg, "yaml: ")
	}
	if parserProblems[msg] {
		// yaml.v3 (v3.0.1, parser.fail) gives the 0-based line of the construct being
		// parsed for these, where it gives 1-based lines for scanner errors; it leaves
		// the line out when it is 0, i.e. on the first line.
		line++
	}
	p.add(line, "", "syntax error: %s", msg)
}

// parserProblems are the errors of yaml.v3's parser (parserc.go), as opposed to its
// scanner.
var parserProblems = map[string]bool{
	"did not find expected <stream-start>":   true,
	"did not find expected <document start>": true,
	"found duplicate %YAML directive":        true,
	"found incompatible YAML document":       true,
	"found duplicate %TAG directive":         true,
	"found undefined tag handle":             true,
	"did not find expected node content":     true,
	"did not find expected '-' indicator":    true,
	"did not find expected key":              true,
	"did not find expected ',' or ']'":       true,
	"did not find expected ',' or '}'":       true,
}

// resolve follows aliases to the node they stand for.
func resolve(n *yaml.Node) *yaml.Node {
	for i := 0; i < 100 && n != nil && n.Kind == yaml.AliasNode && n.Alias != nil; i++ {
		n = n.Alias
	}
	return n
}

func isNull(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null"
}

// kindName names what a node is, for type errors: `string "abc"`, `list`, ...
func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "mapping"
	case yaml.SequenceNode:
		return "list"
	case yaml.ScalarNode:
		switch t := n.ShortTag(); t {
		case "!!null":
			return "null"
		case "!!str":
			return "string " + quote(n.Value)
		case "!!int":
			return "integer " + short(n.Value)
		case "!!float":
			return "float " + short(n.Value)
		case "!!bool":
			return "bool " + short(n.Value)
		case "!!timestamp":
			return "timestamp " + short(n.Value)
		default:
			return "value tagged " + short(t)
		}
	case yaml.AliasNode:
		return "alias"
	}
	return "nothing"
}

// short truncates s for messages, quoting it unless it is plain text.
func short(s string) string {
	if len(s) > 40 || strings.ContainsFunc(s, func(r rune) bool { return r <= ' ' || r == 0x7f || r == utf8.RuneError }) {
		return quote(s)
	}
	return s
}

// quote quotes a user string for messages, truncated.
func quote(s string) string {
	if len(s) > 40 {
		return strconv.Quote(s[:40]) + "..."
	}
	return strconv.Quote(s)
}

var simpleKey = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)

// join appends a key to a field path, quoting keys that are not plain words.
func join(path, key string) string {
	if !simpleKey.MatchString(key) {
		key = quote(key)
	}
	if path == "" {
		return key
	}
	return path + "." + key
}

func index(path string, i int) string { return path + "[" + strconv.Itoa(i) + "]" }

type pair struct {
	key, val *yaml.Node
	merged   bool // came from a merge key (<<): explicit keys override it
}

// mapping walks a mapping at path whose accepted keys are keys. For each key present
// with a non-null value it records the value's line and calls fn with the key, the
// field's path and the value (aliases resolved). It reports unknown keys, duplicate
// keys and a value that is not a mapping (then returns false). Merge keys (<<) are
// supported; keys given explicitly override merged ones.
func (p *parser) mapping(n *yaml.Node, path string, keys []string, fn func(key, path string, v *yaml.Node)) bool {
	n = resolve(n)
	if n.Kind != yaml.MappingNode {
		p.fail(n, path, "must be a mapping, got %s", kindName(n))
		return false
	}
	p.lines[path] = n.Line
	pairs := p.pairs(n, path, 0, map[*yaml.Node]bool{n: true})
	seen := map[string]int{}
	for _, kv := range pairs {
		k := resolve(kv.key)
		if k.Kind != yaml.ScalarNode {
			p.add(k.Line, path, "keys must be strings, got %s", kindName(k))
			continue
		}
		key := k.Value
		fpath := join(path, key)
		if !slices.Contains(keys, key) {
			p.add(k.Line, fpath, "%s", unknownField(key, keys))
			continue
		}
		if first, dup := seen[key]; dup {
			if !kv.merged {
				p.add(k.Line, fpath, "duplicate key (first at line %d)", first)
			}
			continue
		}
		seen[key] = k.Line
		v := resolve(kv.val)
		if isNull(v) {
			continue // null is absent: "key:" with no value
		}
		p.lines[fpath] = v.Line
		fn(key, fpath, v)
	}
	return true
}

// pairs returns the key/value pairs of a mapping: its own first, then those of the
// mappings it merges (<<), in order.
func (p *parser) pairs(n *yaml.Node, path string, depth int, visited map[*yaml.Node]bool) []pair {
	var own, merged []pair
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Kind == yaml.ScalarNode && k.ShortTag() == "!!merge" {
			merged = append(merged, p.merge(v, path, depth, visited)...)
			continue
		}
		own = append(own, pair{k, v, depth > 0})
	}
	return append(own, merged...)
}

func (p *parser) merge(v *yaml.Node, path string, depth int, visited map[*yaml.Node]bool) []pair {
	if depth >= maxMergeDepth {
		p.add(v.Line, path, "merge keys (<<) nested too deeply")
		return nil
	}
	var maps []*yaml.Node
	switch v = resolve(v); v.Kind {
	case yaml.MappingNode:
		maps = []*yaml.Node{v}
	case yaml.SequenceNode:
		for _, m := range v.Content {
			maps = append(maps, resolve(m))
		}
	default:
		maps = []*yaml.Node{v}
	}
	var out []pair
	for _, m := range maps {
		if m.Kind != yaml.MappingNode {
			p.add(m.Line, path, "merge key (<<) must refer to a mapping or a list of mappings, got %s", kindName(m))
			continue
		}
		if visited[m] {
			continue // merged already (or merges itself): nothing new
		}
		visited[m] = true
		out = append(out, p.pairs(m, path, depth+1, visited)...)
	}
	for i := range out {
		out[i].merged = true
	}
	return out
}

// unknownField says a key is not accepted, suggesting the closest accepted one.
func unknownField(key string, keys []string) string {
	best, bestD := "", math.MaxInt
	for _, k := range keys {
		// close enough: at most one edit per three letters of the accepted key
		if d := editDistance(strings.ToLower(key), k); d <= max(1, len(k)/3) && d < bestD {
			best, bestD = k, d
		}
	}
	if best != "" {
		return fmt.Sprintf("unknown field (did you mean %s?)", best)
	}
	return fmt.Sprintf("unknown field (accepted: %s)", strings.Join(keys, ", "))
}

// editDistance is the Levenshtein distance, capped for long inputs.
func editDistance(a, b string) int {
	if len(a) > 64 || len(b) > 64 {
		return math.MaxInt
	}
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// list walks a list at path, calling fn for each item with its path and the item
// (aliases resolved). It reports a value that is not a list and then returns false.
func (p *parser) list(n *yaml.Node, path string, fn func(i int, path string, item *yaml.Node)) bool {
	n = resolve(n)
	if n.Kind != yaml.SequenceNode {
		p.fail(n, path, "must be a list, got %s", kindName(n))
		return false
	}
	for i, it := range n.Content {
		ipath := index(path, i)
		it = resolve(it)
		p.lines[ipath] = it.Line
		fn(i, ipath, it)
	}
	return true
}

// str reads any scalar as a string, as written (so `password: 1234` is "1234").
// filePath reads a file's path: a relative one is relative to the config file's
// directory, so that a config loaded from systemd's credentials directory (--config
// %d/connect.yaml, LoadCredential=) finds the secrets loaded beside it.
func (p *parser) filePath(n *yaml.Node, path string) string {
	s, ok := p.str(n, path)
	if !ok || s == "" {
		return s
	}
	s = PathBeside(p.file, s)
	if p.checkFiles {
		p.checkFile(n.Line, path, s)
	}
	return s
}

// PathBeside is path as the config file file names it: relative to file's directory
// when it is relative.
func PathBeside(file, path string) string {
	if filepath.IsAbs(path) {
		return path
	}
	return filepath.Join(filepath.Dir(file), path)
}

func (p *parser) str(n *yaml.Node, path string) (string, bool) {
	if n.Kind != yaml.ScalarNode || isNull(n) {
		p.fail(n, path, "must be a string, got %s", kindName(n))
		return "", false
	}
	return n.Value, true
}

var digits = regexp.MustCompile(`^[-+]?[0-9_]+$`)

// integer reads an integer in the schema's range of the field. Strings ("80") and
// floats (80.0) are type errors.
func (p *parser) integer(n *yaml.Node, path string) (int64, bool) {
	r := fieldAt(path).Range
	lo, hi := r.Min, r.Max
	if n.Kind != yaml.ScalarNode {
		p.fail(n, path, "must be an integer, got %s", kindName(n))
		return 0, false
	}
	tag := n.ShortTag()
	if tag == "!!float" && digits.MatchString(n.Value) && len(n.Value) > 18 {
		// yaml.v3 resolves integers that overflow 64 bits as floats
		p.fail(n, path, "%s is out of range (accepted: %d..%d)", short(n.Value), lo, hi)
		return 0, false
	}
	if tag != "!!int" {
		p.fail(n, path, "must be an integer, got %s", kindName(n))
		return 0, false
	}
	v, err := strconv.ParseInt(strings.ReplaceAll(n.Value, "_", ""), 0, 64)
	if err != nil {
		if errors.Is(err, strconv.ErrRange) {
			p.fail(n, path, "%s is out of range (accepted: %d..%d)", short(n.Value), lo, hi)
		} else {
			p.fail(n, path, "must be an integer, got %s", quote(n.Value))
		}
		return 0, false
	}
	if v < 0 && lo >= 0 {
		p.fail(n, path, "must not be negative (accepted: %d..%d)", lo, hi)
		return 0, false
	}
	if v < lo || v > hi {
		p.fail(n, path, "%s is out of range (accepted: %d..%d)", short(n.Value), lo, hi)
		return 0, false
	}
	return v, true
}

// duration reads a Go duration (time.ParseDuration): 500ms, 9s, 1m30s.
func (p *parser) duration(n *yaml.Node, path string) (time.Duration, bool) {
	s, ok := p.str(n, path)
	if !ok {
		return 0, false
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		if _, err := time.ParseDuration(s + "s"); err == nil && !strings.HasSuffix(s, "s") {
			p.fail(n, path, "%s has no unit (did you mean %ss?)", quote(s), s)
		} else {
			p.fail(n, path, "%s is not a duration (use e.g. 500ms, 9s, 1m30s)", quote(s))
		}
		return 0, false
	}
	return d, true
}

// addr reads an IPv4 or IPv6 address, without zone; IPv4-mapped IPv6 addresses must
// be written as IPv4.
func (p *parser) addr(n *yaml.Node, path string) (netip.Addr, bool) {
	s, ok := p.str(n, path)
	if !ok {
		return netip.Addr{}, false
	}
	a, err := netip.ParseAddr(s)
	switch {
	case err != nil && strings.Contains(s, "/"):
		p.fail(n, path, "%s is a prefix, not an IP address", quote(s))
	case err != nil:
		p.fail(n, path, "%s is not an IPv4 or IPv6 address", quote(s))
	case a.Zone() != "":
		p.fail(n, path, "%s: zones are not allowed", quote(s))
	case a.Is4In6():
		p.fail(n, path, "%s is IPv4-mapped; write it as %s", quote(s), a.Unmap())
	default:
		return a, true
	}
	return netip.Addr{}, false
}

// boolean reads true or false (YAML 1.2: yes/no/on/off are strings, so type errors).
func (p *parser) boolean(n *yaml.Node, path string) (bool, bool) {
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!bool" {
		p.fail(n, path, "must be true or false, got %s", kindName(n))
		return false, false
	}
	return strings.EqualFold(n.Value, "true"), true
}

// prefix reads an IPv4 or IPv6 prefix in CIDR notation, without host bits.
func (p *parser) prefix(n *yaml.Node, path string) (netip.Prefix, bool) {
	s, ok := p.str(n, path)
	if !ok {
		return netip.Prefix{}, false
	}
	pfx, err := netip.ParsePrefix(s)
	switch {
	case err != nil:
		p.fail(n, path, "%s is not a prefix (e.g. 172.16.0.0/16, fd00:e::/64)", quote(s))
	case pfx.Addr().Is4In6():
		p.fail(n, path, "%s is IPv4-mapped; write it as IPv4", quote(s))
	case pfx != pfx.Masked():
		p.fail(n, path, "%s has host bits set (did you mean %s?)", quote(s), pfx.Masked())
	default:
		return pfx, true
	}
	return netip.Prefix{}, false
}

// enum reads a string that must be one of the schema's values of the field.
func (p *parser) enum(n *yaml.Node, path string) (string, bool) {
	allowed := fieldAt(path).Enum
	s, ok := p.str(n, path)
	if !ok {
		return "", false
	}
	if !slices.Contains(allowed, s) {
		p.fail(n, path, "%s is not valid (accepted: %s)", quote(s), strings.Join(allowed, ", "))
		return "", false
	}
	return s, true
}

// stringList reads a list of strings. The result has one entry per item (empty for bad
// items) so that indexes match field paths.
func (p *parser) stringList(n *yaml.Node, path string) []string {
	var out []string
	p.list(n, path, func(_ int, ipath string, it *yaml.Node) {
		s, _ := p.str(it, ipath)
		out = append(out, s)
	})
	return out
}

// addrs reads a list of addresses, one entry per item (zero for bad items).
func (p *parser) addrs(n *yaml.Node, path string) []netip.Addr {
	var out []netip.Addr
	p.list(n, path, func(_ int, ipath string, it *yaml.Node) {
		a, _ := p.addr(it, ipath)
		out = append(out, a)
	})
	return out
}

// The walkers. Each fills the model from the fields present, with the keys, ranges and
// enum values of schema.go; defaults.go fills the absent ones and validate.go checks
// what a single value cannot.

func (p *parser) config(n *yaml.Node) *Config {
	c := &Config{}
	p.mapping(n, "", keysOf(NodeSchema, ""), func(key, path string, v *yaml.Node) {
		switch key {
		case "node":
			p.node(v, path, &c.Node)
		case "bgp":
			c.BGP = &BGP{}
			p.bgp(v, path, c.BGP)
		case "fleet":
			c.Fleet = &Fleet{}
			p.fleet(v, path, c.Fleet)
		case "kubernetes":
			c.Kubernetes = &Kubernetes{}
			p.kubernetes(v, path, NodeSchema, c.Kubernetes)
		case "tunnels":
			c.Tunnels = &Tunnels{}
			p.tunnels(v, path, c.Tunnels)
		case "services":
			p.list(v, path, func(_ int, ipath string, it *yaml.Node) {
				c.Services = append(c.Services, Service{})
				p.service(it, ipath, &c.Services[len(c.Services)-1])
			})
		}
	})
	return c
}

func (p *parser) node(n *yaml.Node, path string, out *Node) {
	p.mapping(n, path, keysOf(NodeSchema, "node"), func(key, path string, v *yaml.Node) {
		switch key {
		case "name":
			out.Name, _ = p.str(v, path)
		case "site":
			out.Site, _ = p.str(v, path)
		case "interfaces":
			out.Interfaces = p.stringList(v, path)
		case "xdp_mode":
			s, _ := p.enum(v, path)
			out.XDPMode = XDPMode(s)
		case "address":
			out.Address, _ = p.addr(v, path)
		case "address6":
			out.Address6, _ = p.addr(v, path)
		case "api":
			out.API, _ = p.str(v, path)
		case "api_token":
			out.APIToken, _ = p.str(v, path)
		case "api_token_file":
			out.APITokenFile = p.filePath(v, path)
		case "api_hosts":
			out.APIHosts = p.stringList(v, path)
		case "api_cert_file":
			out.APICertFile = p.filePath(v, path)
		case "api_key_file":
			out.APIKeyFile = p.filePath(v, path)
		case "api_insecure_remote":
			out.APIInsecureRemote, _ = p.boolean(v, path)
		case "flow_table_size":
			x, _ := p.integer(v, path)
			out.FlowTableSize = uint32(x)
		case "max_services":
			x, _ := p.integer(v, path)
			out.MaxServices = uint32(x)
		case "max_backends":
			x, _ := p.integer(v, path)
			out.MaxBackends = uint32(x)
		case "entropy_source":
			out.EntropySource, _ = p.boolean(v, path)
		case "entropy_prefix4":
			out.EntropyPrefix4, _ = p.prefix(v, path)
		case "entropy_prefix6":
			out.EntropyPrefix6, _ = p.prefix(v, path)
		case "new_flow_rate":
			x, _ := p.integer(v, path)
			out.NewFlowRate = uint32(x)
		case "forward_transit":
			out.ForwardTransit, _ = p.boolean(v, path)
		}
	})
}

func (p *parser) fleet(n *yaml.Node, path string, out *Fleet) {
	p.mapping(n, path, keysOf(NodeSchema, "fleet"), func(key, path string, v *yaml.Node) {
		switch key {
		case "etcd":
			p.mapping(v, path, keysOf(NodeSchema, "fleet.etcd"), func(key, path string, v *yaml.Node) {
				switch key {
				case "endpoints":
					out.Endpoints = p.stringList(v, path)
				case "cert_file":
					out.CertFile = p.filePath(v, path)
				case "key_file":
					out.KeyFile = p.filePath(v, path)
				case "ca_file":
					out.CAFile = p.filePath(v, path)
				case "username":
					out.Username, _ = p.str(v, path)
				case "password_file":
					out.PasswordFile = p.filePath(v, path)
				}
			})
		case "prefix":
			out.Prefix, _ = p.str(v, path)
		}
	})
}

func (p *parser) kubernetes(n *yaml.Node, path string, schema []Field, out *Kubernetes) {
	p.mapping(n, path, keysOf(schema, "kubernetes"), func(key, path string, v *yaml.Node) {
		switch key {
		case "kubeconfig":
			// as written: client-go reads it relative to the working directory
			out.Kubeconfig, _ = p.str(v, path)
			if p.checkFiles && out.Kubeconfig != "" {
				p.checkFile(v.Line, path, out.Kubeconfig)
			}
		case "default_class":
			out.DefaultClass, _ = p.boolean(v, path)
		case "node_name":
			out.NodeName, _ = p.str(v, path)
		}
	})
}

func (p *parser) tunnels(n *yaml.Node, path string, out *Tunnels) {
	p.mapping(n, path, keysOf(NodeSchema, "tunnels"), func(key, path string, v *yaml.Node) {
		switch key {
		case "listen":
			out.Listen, _ = p.str(v, path)
		case "cert_file":
			out.CertFile = p.filePath(v, path)
		case "key_file":
			out.KeyFile = p.filePath(v, path)
		case "tokens_file":
			out.TokensFile = p.filePath(v, path)
		case "relay_token_file":
			out.RelayTokenFile = p.filePath(v, path)
		case "ca_file":
			out.CAFile = p.filePath(v, path)
		case "idle_timeout":
			out.IdleTimeout, _ = p.duration(v, path)
		case "max_conns_per_source":
			x, _ := p.integer(v, path)
			out.MaxConnsPerSource = int(x)
		case "max_pending_hellos":
			x, _ := p.integer(v, path)
			out.MaxPendingHellos = int(x)
		}
	})
}

func (p *parser) bgp(n *yaml.Node, path string, out *BGP) {
	p.mapping(n, path, keysOf(NodeSchema, "bgp"), func(key, path string, v *yaml.Node) {
		switch key {
		case "asn":
			x, _ := p.integer(v, path)
			out.ASN = uint32(x)
		case "router_id":
			out.RouterID, _ = p.addr(v, path)
		case "peers":
			p.list(v, path, func(_ int, ipath string, it *yaml.Node) {
				out.Peers = append(out.Peers, Peer{})
				p.peer(it, ipath, &out.Peers[len(out.Peers)-1])
			})
		case "drain_time":
			out.DrainTime, _ = p.duration(v, path)
		case "communities":
			out.Communities = p.communities(v, path)
		case "large_communities":
			out.LargeCommunities = p.largeCommunities(v, path)
		}
	})
}

func (p *parser) peer(n *yaml.Node, path string, out *Peer) {
	p.mapping(n, path, keysOf(NodeSchema, "bgp.peers[]"), func(key, path string, v *yaml.Node) {
		switch key {
		case "address":
			out.Address, _ = p.addr(v, path)
		case "asn":
			x, _ := p.integer(v, path)
			out.ASN = uint32(x)
		case "hold_time":
			out.HoldTime, _ = p.duration(v, path)
		case "password":
			out.Password, _ = p.str(v, path)
		case "port":
			x, _ := p.integer(v, path)
			out.Port = uint16(x)
		case "ebgp_multihop":
			x, _ := p.integer(v, path)
			out.EBGPMultihop = uint8(x)
		case "bfd":
			out.BFD = &BFD{}
			p.bfd(v, path, out.BFD)
		}
	})
}

func (p *parser) bfd(n *yaml.Node, path string, out *BFD) {
	p.mapping(n, path, keysOf(NodeSchema, "bgp.peers[].bfd"), func(key, path string, v *yaml.Node) {
		switch key {
		case "min_rx":
			out.MinRx, _ = p.duration(v, path)
		case "min_tx":
			out.MinTx, _ = p.duration(v, path)
		case "multiplier":
			x, _ := p.integer(v, path)
			out.Multiplier = uint8(x)
		}
	})
}

func (p *parser) serviceBGP(n *yaml.Node, path string, out *ServiceBGP) {
	p.mapping(n, path, keysOf(NodeSchema, "services[].bgp"), func(key, path string, v *yaml.Node) {
		switch key {
		case "communities":
			out.Communities = p.communities(v, path)
		case "large_communities":
			out.LargeCommunities = p.largeCommunities(v, path)
		case "med":
			if x, ok := p.integer(v, path); ok {
				med := uint32(x)
				out.MED = &med
			}
		case "prepend":
			x, _ := p.integer(v, path)
			out.Prepend = uint8(x)
		}
	})
}

// communities reads a list of standard communities; a bad item is reported and left out.
func (p *parser) communities(n *yaml.Node, path string) []Community {
	return parsedList(p, n, path, ParseCommunity)
}

// largeCommunities reads a list of large communities; a bad item is reported and left out.
func (p *parser) largeCommunities(n *yaml.Node, path string) []LargeCommunity {
	return parsedList(p, n, path, ParseLargeCommunity)
}

func parsedList[T any](p *parser, n *yaml.Node, path string, parse func(string) (T, error)) []T {
	var out []T
	p.list(n, path, func(_ int, ipath string, it *yaml.Node) {
		s, ok := p.str(it, ipath)
		if !ok {
			return
		}
		v, err := parse(s)
		if err != nil {
			p.fail(it, ipath, "%v", err)
			return
		}
		out = append(out, v)
	})
	return out
}

func (p *parser) service(n *yaml.Node, path string, out *Service) {
	p.mapping(n, path, keysOf(NodeSchema, "services[]"), func(key, path string, v *yaml.Node) {
		switch key {
		case "name":
			out.Name, _ = p.str(v, path)
		case "vip":
			out.VIP, _ = p.addr(v, path)
		case "port":
			x, _ := p.integer(v, path)
			out.Port = uint16(x)
		case "protocol":
			s, _ := p.enum(v, path)
			out.Protocol = Protocol(s)
		case "forwarding":
			s, _ := p.enum(v, path)
			out.Forwarding = Forwarding(s)
		case "gue_port":
			x, _ := p.integer(v, path)
			out.GUEPort = uint16(x)
		case "backend_port":
			x, _ := p.integer(v, path)
			out.BackendPort = uint16(x)
		case "proxy_protocol":
			s, _ := p.enum(v, path)
			out.ProxyProtocol = ProxyProtocol(s)
		case "scheduler":
			s, _ := p.enum(v, path)
			out.Scheduler = Scheduler(s)
		case "table_size":
			x, _ := p.integer(v, path)
			out.TableSize = uint32(x)
		case "origins":
			p.list(v, path, func(_ int, ipath string, it *yaml.Node) {
				out.Origins = append(out.Origins, Origin{})
				p.origin(it, ipath, &out.Origins[len(out.Origins)-1])
			})
		case "backends":
			p.list(v, path, func(_ int, ipath string, it *yaml.Node) {
				out.Backends = append(out.Backends, Backend{})
				p.backend(it, ipath, &out.Backends[len(out.Backends)-1])
			})
		case "health":
			p.health(v, path, &out.Health)
		case "bgp":
			p.serviceBGP(v, path, &out.BGP)
		}
	})
}

func (p *parser) backend(n *yaml.Node, path string, out *Backend) {
	p.mapping(n, path, keysOf(NodeSchema, "services[].backends[]"), func(key, path string, v *yaml.Node) {
		switch key {
		case "address":
			out.Address, _ = p.addr(v, path)
		case "weight":
			x, _ := p.integer(v, path)
			out.Weight = uint32(x)
		case "origin":
			out.Origin, _ = p.str(v, path)
		}
	})
}

func (p *parser) origin(n *yaml.Node, path string, out *Origin) {
	p.mapping(n, path, keysOf(NodeSchema, "services[].origins[]"), func(key, path string, v *yaml.Node) {
		switch key {
		case "name":
			out.Name, _ = p.str(v, path)
		case "capacity":
			x, _ := p.integer(v, path)
			out.Capacity = uint32(x)
		case "tunnel":
			out.Tunnel, _ = p.boolean(v, path)
		case "weight":
			x, _ := p.integer(v, path)
			out.Weight = uint32(x)
		}
	})
}

func (p *parser) health(n *yaml.Node, path string, out *Health) {
	p.mapping(n, path, keysOf(NodeSchema, "services[].health"), func(key, path string, v *yaml.Node) {
		switch key {
		case "kind":
			s, _ := p.enum(v, path)
			out.Kind = HealthKind(s)
		case "port":
			x, _ := p.integer(v, path)
			out.Port = uint16(x)
		case "path":
			out.Path, _ = p.str(v, path)
		case "interval":
			out.Interval, _ = p.duration(v, path)
		case "timeout":
			out.Timeout, _ = p.duration(v, path)
		case "rise":
			x, _ := p.integer(v, path)
			out.Rise = int(x)
		case "fall":
			x, _ := p.integer(v, path)
			out.Fall = int(x)
		}
	})
}

func (p *parser) backendFile(n *yaml.Node) *BackendAgent {
	a := &BackendAgent{}
	p.mapping(n, "", keysOf(BackendSchema, ""), func(key, path string, v *yaml.Node) {
		if key == "kubernetes" {
			a.Kubernetes = &Kubernetes{}
			p.kubernetes(v, path, BackendSchema, a.Kubernetes)
			return
		}
		p.mapping(v, path, keysOf(BackendSchema, "backend"), func(key, path string, v *yaml.Node) {
			switch key {
			case "interface":
				a.Interface, _ = p.str(v, path)
			case "hook":
				s, _ := p.enum(v, path)
				a.Hook = DecapHook(s)
			case "vips":
				a.VIPs = p.addrs(v, path)
			case "gue_port":
				x, _ := p.integer(v, path)
				a.GUEPort = uint16(x)
			}
		})
	})
	return a
}
