package image

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// tagged is an image reference with a version tag or a digest: REPO:TAG or REPO@sha256:…
var tagged = regexp.MustCompile(`^[a-z0-9./_-]+(:[0-9A-Za-z_][0-9A-Za-z_.-]{0,127}|@sha256:[0-9a-f]{64})$`)

// No manifest of deploy/kubernetes names an image by :latest or without a tag (which
// is :latest): a node would run whatever build the registry holds when it pulls, not
// the one its neighbours run. Every container names the same image. `make image` tags
// with the version, not latest.
func TestManifestsNameAVersionTag(t *testing.T) {
	files, err := filepath.Glob("../../deploy/kubernetes/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests: %v", err)
	}
	seen := map[string][]string{} // image → where
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		dec := yaml.NewDecoder(bytes.NewReader(data))
		for {
			var doc yaml.Node
			if err := dec.Decode(&doc); errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			images(&doc, func(image string, line int) {
				seen[image] = append(seen[image], fmt.Sprintf("%s:%d", filepath.Base(f), line))
				ref := image[strings.LastIndex(image, "/")+1:]
				if !tagged.MatchString(image) || strings.HasSuffix(ref, ":latest") {
					t.Errorf("%s:%d: image %q: name a version tag (or a digest), not latest or none", f, line, image)
				}
			})
		}
	}
	if len(seen) == 0 {
		t.Fatal("no image in the manifests: the test reads nothing")
	}
	if len(seen) > 1 {
		t.Errorf("the manifests name different images, a mix of builds: %v", seen)
	}

	mk, err := os.ReadFile("../../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	image := ""
	if m := regexp.MustCompile(`(?m)^IMAGE \?= (.*)$`).FindSubmatch(mk); m != nil {
		image = string(m[1])
	}
	if !strings.Contains(image, "$(VERSION)") || strings.Contains(image, "latest") {
		t.Errorf("Makefile: IMAGE ?= %q, want a tag made of $(VERSION)", image)
	}
}

// images calls f with every value of a key "image" in a container list (containers,
// initContainers, ephemeralContainers) under n.
func images(n *yaml.Node, f func(image string, line int)) {
	if n.Kind == yaml.MappingNode {
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			if strings.HasSuffix(strings.ToLower(k.Value), "containers") && v.Kind == yaml.SequenceNode {
				for _, c := range v.Content {
					for j := 0; j+1 < len(c.Content); j += 2 {
						if c.Content[j].Value == "image" {
							f(c.Content[j+1].Value, c.Content[j+1].Line)
						}
					}
				}
			}
		}
	}
	for _, c := range n.Content {
		images(c, f)
	}
}
