package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/manifoldlb/manifold/internal/hostprog"
	"github.com/manifoldlb/manifold/internal/testenv"
)

// TestUsageListsEveryCommand: the usage is drawn from the table, and every row says
// what it does.
func TestUsageListsEveryCommand(t *testing.T) {
	u := usage()
	for _, c := range commands {
		if c.summary == "" {
			t.Errorf("command %s has no summary", c.name)
		}
		if !strings.Contains(u, "manifold "+c.name) || !strings.Contains(u, c.summary) {
			t.Errorf("usage lacks %s:\n%s", c.name, u)
		}
	}
}

// TestVersionNamesTheEmbeddedObjects: the hashes are those of the committed BPF
// objects the binary embeds, not of something else.
func TestVersionNamesTheEmbeddedObjects(t *testing.T) {
	var out bytes.Buffer
	if err := printVersion(&out); err != nil {
		t.Fatal(err)
	}
	for _, obj := range []string{"lb_bpfel.o", "decap_bpfel.o"} {
		data, err := os.ReadFile(filepath.Join("..", "..", "internal", "datapath", obj))
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(data)
		want := "bpf: " + obj + " sha256:" + hex.EncodeToString(sum[:])
		if !strings.Contains(out.String(), want) {
			t.Errorf("version output lacks %q:\n%s", want, out.String())
		}
	}
	if !strings.HasPrefix(out.String(), "manifold "+version+"\n") || !strings.Contains(out.String(), "go: go1.") {
		t.Errorf("version output:\n%s", out.String())
	}
}

// TestBashCompletion sources the generated script in a real bash and asks it what
// completes after a few command lines.
func TestBashCompletion(t *testing.T) {
	dir := t.TempDir()
	var script bytes.Buffer
	if err := completion([]string{"bash"}, &script); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "manifold.bash")
	if err := os.WriteFile(path, script.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "node.yaml"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	complete := func(words ...string) string {
		t.Helper()
		// COMP_WORDS is the line as bash splits it; the last word is the one completed.
		line := "source " + path + "; COMP_WORDS=(" + strings.Join(quoteAll(words), " ") + "); COMP_CWORD=" +
			strconv.Itoa(len(words)-1) + `; _manifold; echo "${COMPREPLY[*]}"`
		out, err := hostprog.Command(hostprog.Bash, "--norc", "--noprofile", "-c", line).CombinedOutput()
		if err != nil {
			t.Fatalf("bash: %v\n%s", err, out)
		}
		return strings.TrimSpace(string(out))
	}
	cases := []struct {
		words []string
		want  string
	}{
		{[]string{"manifold", "ct"}, "ctl"},
		{[]string{"manifold", "ve"}, "version"},
		{[]string{"manifold", "ctl", "dr"}, "drain"},
		{[]string{"manifold", "ctl", "st"}, "status steering"},
		{[]string{"manifold", "completion", ""}, "bash zsh"},
		{[]string{"manifold", "run", "--c"}, "--config"},
		{[]string{"manifold", "run", "--config", filepath.Join(dir, "no")}, filepath.Join(dir, "node.yaml")},
	}
	for _, c := range cases {
		if got := complete(c.words...); got != c.want {
			t.Errorf("%q completes to %q, want %q", c.words, got, c.want)
		}
	}
	if err := completion([]string{"fish"}, &bytes.Buffer{}); err == nil {
		t.Error("completion fish: no error")
	}
}

func quoteAll(words []string) []string {
	q := make([]string, len(words))
	for i, w := range words {
		q[i] = "'" + w + "'"
	}
	return q
}

// TestManPage: the manual names every command and every ctl command, and man renders
// it without a warning.
func TestManPage(t *testing.T) {
	var page bytes.Buffer
	if err := manPage(&page); err != nil {
		t.Fatal(err)
	}
	for _, c := range commands {
		if !strings.Contains(page.String(), ".B manifold "+strings.ReplaceAll(c.name, "-", `\-`)+"\n") {
			t.Errorf("the manual's synopsis lacks %s", c.name)
		}
	}
	for _, c := range ctlCommands {
		if !strings.Contains(page.String(), ".B ctl "+c.name) {
			t.Errorf("the manual lacks ctl %s", c.name)
		}
	}
	if _, err := hostprog.Man.Path(); err != nil {
		testenv.Missing(t, err)
	}
	path := filepath.Join(t.TempDir(), "manifold.1")
	if err := os.WriteFile(path, page.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := hostprog.Command(hostprog.Man, "--warnings", "-l", "-Tutf8", path)
	cmd.Env = append(os.Environ(), "MANWIDTH=80", "LC_ALL=C.UTF-8")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	// man marks bold and italic by overstriking (a character, a backspace, the character)
	plain := regexp.MustCompile(".\b").ReplaceAll(out, nil)
	if err != nil || stderr.Len() > 0 || !bytes.Contains(plain, []byte("SIGHUP")) || !bytes.Contains(plain, []byte("COMMANDS")) {
		t.Errorf("man: %v\n%s", err, stderr.String())
	}
}
