package decode

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

func TestDepth(t *testing.T) {
	nest := func(open, close string, n int, inner string) string {
		return strings.Repeat(open, n) + inner + strings.Repeat(close, n)
	}
	for _, c := range []struct {
		name string
		doc  string
		ok   bool
	}{
		{"JSON 64 deep", nest("[", "]", 64, "1"), true},
		{"JSON 65 deep", nest("[", "]", 65, "1"), false},
		{"JSON objects 65 deep", nest(`{"a":`, "}", 65, "1"), false},
		{"JSON 520 000 deep", nest("[", "]", 520_000, ""), false},
	} {
		_, err := JSON([]byte(c.doc))
		if c.ok != (err == nil) {
			t.Errorf("%s: %v", c.name, err)
		}
		if !c.ok && !strings.Contains(fmt.Sprint(err), "nested more than 64 levels deep (the limit)") {
			t.Errorf("%s: %v, want the limit named", c.name, err)
		}
		// the same nesting in YAML (JSON is YAML's flow style)
		if _, err := YAML([]byte(c.doc)); c.ok != (err == nil) && len(c.doc) < 1000 {
			t.Errorf("%s as YAML: %v", c.name, err)
		}
	}
	// an alias that nests its target deeper than the limit
	doc := "a: &x " + nest("[", "]", 40, "1") + "\nb: " + nest("[", "]", 30, "*x") + "\n"
	var de *Error
	if _, err := YAML([]byte(doc)); !errors.As(err, &de) || de.Line != 2 || !strings.Contains(de.Msg, "alias *x nests the document more than 64 levels deep") {
		t.Errorf("alias nesting too deep: %v", err)
	}
}

func TestAliases(t *testing.T) {
	// 10-way merge keys: each level is ten times the one before
	bomb := func(levels int) string {
		s := "a0: &a0 {k: v, l: w}\n"
		for i := 1; i <= levels; i++ {
			refs := strings.Repeat(fmt.Sprintf("*a%d, ", i-1), 10)
			s += fmt.Sprintf("a%d: &a%d {<<: [%s], x: y}\n", i, i, refs[:len(refs)-2])
		}
		return s
	}
	if _, err := YAML([]byte(bomb(3))); err != nil {
		t.Errorf("3 levels (a few thousand nodes): %v", err)
	}
	for _, levels := range []int{5, 9, 30} {
		_, err := YAML([]byte(bomb(levels)))
		var de *Error
		if !errors.As(err, &de) || !strings.Contains(de.Msg, "more than 65536 nodes beyond those written (the limit)") || de.Line == 0 {
			t.Errorf("%d levels: %v, want the alias limit named at a line", levels, err)
		}
	}
	for _, doc := range []string{"a: &a {<<: *a}\n", "a: &a [1, *a]\n", "a: &a {b: &b {c: *a}}\n"} {
		if _, err := YAML([]byte(doc)); err == nil || !strings.Contains(err.Error(), "refers to a node that contains it") {
			t.Errorf("%q: %v, want the cycle refused", doc, err)
		}
	}
	// a shared list used many times is fine while it stays under the limit
	ok := "pool: &p [" + strings.Repeat("{address: 10.0.0.1}, ", 49) + "{address: 10.0.0.1}]\n"
	for i := 0; i < 100; i++ {
		ok += fmt.Sprintf("s%d: *p\n", i)
	}
	if _, err := YAML([]byte(ok)); err != nil {
		t.Errorf("a list of 50 shared by 100: %v", err)
	}
}

func TestSizes(t *testing.T) {
	if _, err := Read(strings.NewReader(strings.Repeat("x", 11)), 10, "the body"); !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), "the body is larger than the limit of 10 bytes") {
		t.Errorf("11 bytes of 10: %v", err)
	}
	if b, err := Read(strings.NewReader("0123456789"), 10, "the body"); err != nil || len(b) != 10 {
		t.Errorf("10 bytes of 10: %d %v", len(b), err)
	}
	if _, err := JSON(make([]byte, MaxBodySize+1)); !errors.Is(err, ErrTooLarge) {
		t.Errorf("a body over MaxBodySize: %v", err)
	}
}

func TestJSON(t *testing.T) {
	for doc, want := range map[string]string{
		`{"a": 1, "a": 2}`: `duplicate key "a"`,
		`{"a": 1} x`:       "data after the top-level value",
		`{"a": `:           "not valid JSON",
		``:                 "not valid JSON",
	} {
		if _, err := JSON([]byte(doc)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want %q", doc, err, want)
		}
	}
	n, err := JSON([]byte(`{"s": "x", "i": 1, "f": 1.5, "b": true, "n": null, "l": [1]}`))
	if err != nil {
		t.Fatal(err)
	}
	var tags []string
	for i := 1; i < len(n.Content); i += 2 {
		tags = append(tags, n.Content[i].Tag)
	}
	if got := strings.Join(tags, " "); got != "!!str !!int !!float !!bool !!null !!seq" {
		t.Errorf("tags %s", got)
	}
}
