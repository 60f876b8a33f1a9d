package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/manifoldlb/manifold/internal/config"
	"github.com/manifoldlb/manifold/internal/testenv"
)

// validateMarker, on the line before a ```yaml block of the manual (or before the
// <!-- config-table:NAME --> line of a generated one), says that the block is a whole
// file of that kind, which `manifold validate` must accept.
var validateMarker = regexp.MustCompile(`^<!-- validate: (node|backend|steer|link|connect) -->$`)

// docSnippet is a marked config file of the manual.
type docSnippet struct {
	where string // page:line of the marker
	kind  config.Kind
	body  string
}

// docSnippets reads the marked YAML blocks of README.md and docs/*.md.
func docSnippets(t *testing.T) []docSnippet {
	t.Helper()
	var out []docSnippet
	for _, page := range testenv.Manual(t, filepath.Join("..", "..")) {
		name, lines := page.Name, page.Lines
		for i, l := range lines {
			m := validateMarker.FindStringSubmatch(l)
			if m == nil {
				if strings.HasPrefix(strings.TrimSpace(l), "<!-- validate") {
					t.Errorf("%s:%d: %q: a marker is <!-- validate: node|backend|steer|link|connect -->", name, i+1, l)
				}
				continue
			}
			where := fmt.Sprintf("%s:%d", name, i+1)
			j := i + 1
			if j < len(lines) && strings.HasPrefix(lines[j], "<!-- config-table:") {
				j++
			}
			if j >= len(lines) || lines[j] != "```yaml" {
				t.Errorf("%s: the validate marker is not followed by a ```yaml block", where)
				continue
			}
			end := j + 1
			for end < len(lines) && !strings.HasPrefix(lines[end], "```") {
				end++
			}
			if end == len(lines) {
				t.Errorf("%s: the yaml block does not end", where)
				continue
			}
			out = append(out, docSnippet{where, config.Kind(m[1]), strings.Join(lines[j+1:end], "\n") + "\n"})
		}
	}
	return out
}

// TestDocSnippets runs `manifold validate` on every config file the manual marks as
// whole, so that what the docs tell a user to write is accepted as written.
func TestDocSnippets(t *testing.T) {
	snippets := docSnippets(t)
	if len(snippets) == 0 {
		t.Fatal("no <!-- validate: KIND --> snippet in README.md or docs/*.md")
	}
	dir := t.TempDir()
	// the files a snippet names under /etc/manifold, made, as the examples' are
	etc := t.TempDir()
	namedFiles(t, etc)
	for i, s := range snippets {
		if got := config.KindOf([]byte(s.body)); got != s.kind {
			t.Errorf("%s: marked %s, but manifold validate takes it for a %s file", s.where, s.kind, got)
			continue
		}
		path := filepath.Join(dir, fmt.Sprintf("snippet%d.yaml", i))
		if err := os.WriteFile(path, []byte(strings.ReplaceAll(s.body, "/etc/manifold/", etc+"/")), 0o644); err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		if code := validate([]string{"--config", path}, &out, &out); code != 0 {
			t.Errorf("%s: manifold validate exits %d:\n%s", s.where, code, strings.NewReplacer(path, "snippet", etc+"/", "/etc/manifold/").Replace(out.String()))
		}
	}
}
