package config

import (
	"bytes"
	"flag"
	"fmt"
	"math"
	"os"
	"strings"
	"testing"
	"time"
)

var update = flag.Bool("update", false, "rewrite docs/configuration.md's config reference from the schema")

const configDoc = "../../docs/configuration.md"

// The config reference's example files, each between "<!-- config-table:NAME -->" and
// "<!-- end -->", with the column of their comments.
var configDocTables = []struct {
	name   string
	schema []Field
	col    int
}{
	{"node", NodeSchema, 28},
	{"backend", BackendSchema, 44},
	{"steer", SteerSchema, 44},
	{"link", LinkSchema, 44},
}

// TestConfigDoc checks that docs/configuration.md's config reference is what the schema
// generates.
func TestConfigDoc(t *testing.T) {
	data, err := os.ReadFile(configDoc)
	if err != nil {
		t.Fatal(err)
	}
	out := data
	for _, tab := range configDocTables {
		begin := []byte("<!-- config-table:" + tab.name + " -->\n")
		i := bytes.Index(out, begin)
		j := bytes.Index(out[max(i, 0):], []byte("<!-- end -->"))
		if i < 0 || j < 0 {
			t.Fatalf("%s has no %s...<!-- end --> section", configDoc, begin)
		}
		j += i
		var lines []line
		for _, f := range tab.schema {
			lines = append(lines, line{path: f.Path, value: f.Example, comment: comment(&f)})
		}
		gen := "```yaml\n" + render(lines, tab.col) + "```\n"
		out = append(out[:i+len(begin)], append([]byte(gen), out[j:]...)...)
	}
	if bytes.Equal(out, data) {
		return
	}
	if *update {
		if err := os.WriteFile(configDoc, out, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Errorf("%s's config reference differs from the schema; run go test ./internal/config -run TestConfigDoc -update and review the diff", configDoc)
}

// comment is the config reference's comment on a field: whether it is required, its values, its
// default and range, then its doc.
func comment(f *Field) string {
	var head []string
	if f.Required {
		head = append(head, "required")
	}
	if len(f.Enum) > 0 {
		head = append(head, strings.Join(f.Enum, " | "))
	}
	if f.Default != "" {
		head = append(head, "default "+f.Default)
	}
	if r := f.Range; r != nil {
		switch {
		case f.Type != TypeDuration:
			head = append(head, fmt.Sprintf("%d..%d", r.Min, r.Max))
		case r.Max == math.MaxInt64:
			head = append(head, "at least "+formatDuration(time.Duration(r.Min)))
		case f.OrZero:
			head = append(head, fmt.Sprintf("0s or %s..%s", formatDuration(time.Duration(r.Min)), formatDuration(time.Duration(r.Max))))
		default:
			head = append(head, fmt.Sprintf("%s..%s", formatDuration(time.Duration(r.Min)), formatDuration(time.Duration(r.Max))))
		}
	}
	s := strings.Join(head, ", ")
	if s != "" && f.Doc != "" {
		s += "; "
	}
	return s + f.Doc
}
