package arch

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"
)

// The manual: the README, the changelog and every page under docs/.
func manualPages(t *testing.T) []string {
	t.Helper()
	pages, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	return append([]string{filepath.Join(root, "README.md"), filepath.Join(root, "CHANGELOG.md")}, pages...)
}

// markdownLink is a link or an image: [text](target) or ![text](target).
var markdownLink = regexp.MustCompile(`\]\(([^)\s]+)\)`)

var headingLine = regexp.MustCompile(`^#{1,6} (.+)$`)

// prose is a Markdown file's lines with those of fenced code blocks blanked, so that
// line i+1 of the file is prose[i].
func prose(text string) []string {
	lines := strings.Split(text, "\n")
	fenced := false
	for i, l := range lines {
		if strings.HasPrefix(l, "```") {
			fenced = !fenced
			lines[i] = ""
		} else if fenced {
			lines[i] = ""
		}
	}
	return lines
}

// anchors are the ids GitHub gives a page's headings: lower case, letters, digits, '-'
// and '_' kept, spaces made '-', everything else dropped; a repeated one gets -1, -2, ….
func anchors(text string) map[string]bool {
	ids := map[string]bool{}
	seen := map[string]int{}
	for _, l := range prose(text) {
		m := headingLine.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		var b strings.Builder
		for _, r := range strings.ToLower(strings.TrimSpace(m[1])) {
			switch {
			case r == ' ':
				b.WriteRune('-')
			case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
				b.WriteRune(r)
			}
		}
		id := b.String()
		if n := seen[id]; n > 0 {
			seen[id] = n + 1
			id = fmt.Sprintf("%s-%d", id, n)
		} else {
			seen[id] = 1
		}
		ids[id] = true
	}
	return ids
}

// TestDocLinks checks that every relative link of the manual names a file of the
// repository and, for a page, a heading it has: pages moved between the README and docs/
// take their links with them.
func TestDocLinks(t *testing.T) {
	pageAnchors := map[string]map[string]bool{}
	anchorsOf := func(path string) (map[string]bool, error) {
		if a, ok := pageAnchors[path]; ok {
			return a, nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return nil, err
		}
		pageAnchors[path] = anchors(string(data))
		return pageAnchors[path], nil
	}
	for _, page := range manualPages(t) {
		data, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		name, _ := filepath.Rel(root, page)
		for i, l := range prose(string(data)) {
			for _, m := range markdownLink.FindAllStringSubmatch(l, -1) {
				target := m[1]
				if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
					continue
				}
				file, anchor, _ := strings.Cut(target, "#")
				path := page
				if file != "" {
					path = filepath.Join(filepath.Dir(page), file)
					if _, err := os.Stat(path); err != nil {
						t.Errorf("%s: %d: %s: no such file", name, i+1, target)
						continue
					}
				}
				if anchor == "" {
					continue
				}
				if !strings.HasSuffix(path, ".md") {
					t.Errorf("%s: %d: %s: an anchor into a file that is not a page", name, i+1, target)
					continue
				}
				ids, err := anchorsOf(path)
				if err != nil {
					t.Fatal(err)
				}
				if !ids[anchor] {
					t.Errorf("%s: %d: %s: the page has no such heading", name, i+1, target)
				}
			}
		}
	}
}
