package store

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// A file's services taken apart into documents and composed again are the same
// services; a memory store edits them with the file's own code, comments included.
func TestComposeMemoryAndServiceDocs(t *testing.T) {
	file := open(t, "node.yaml")
	docs, err := ServiceDocsOf(file)
	if err != nil {
		t.Fatal(err)
	}
	if len(docs) != 2 || docs[0].Name != "web" || !strings.Contains(string(docs[0].YAML), "# rack 1") {
		t.Fatalf("docs %+v", docs)
	}
	mem, err := Compose(file, docs)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(mem.Config().Services, file.Config().Services) {
		t.Fatalf("composed services differ from the file's")
	}
	ch, err := mem.Drain("web", "10.0.1.1")
	if err != nil {
		t.Fatal(err)
	}
	after, err := ch.ServiceDocs()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(after[0].YAML), "undrain restores weight 3") || string(after[1].YAML) != string(docs[1].YAML) {
		t.Fatalf("after drain:\n%s\n%s", after[0].YAML, after[1].YAML)
	}
	// a bad edit is refused with the file's own errors, fields relative to the service
	_, err = mem.PutService("web", []byte(`{"vip": "198.51.100.10", "port": 99999, "backends": [{"address": "10.0.1.1"}]}`))
	if se, ok := err.(*Error); !ok || se.Kind != Invalid || se.Problems[0].Field != "port" {
		t.Fatalf("bad put: %v", err)
	}
	// a composed document that is not valid as a whole is refused
	bad := append(docs, ServiceDoc{Name: "dup", YAML: []byte(strings.Replace(string(docs[0].YAML), "name: web", "name: dup", 1))})
	if _, err := Compose(file, bad); err == nil {
		t.Fatal("two services on one VIP:port composed without an error")
	}
	// a fleet node's file: its fleet section stays out of the composed document
	fleetFile := filepath.Join(t.TempDir(), "fleet.yaml")
	if err := os.WriteFile(fleetFile, []byte("node: {name: lb1, interfaces: [eth0], address: 10.0.0.11, address6: 2001:db8::11}\nfleet:\n  etcd: {endpoints: [http://10.0.0.5:2379]}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	fs, err := Open(fleetFile)
	if err != nil {
		t.Fatal(err)
	}
	if mem, err := Compose(fs, docs); err != nil || mem.Config().Fleet != nil || len(mem.Config().Services) != 2 {
		t.Fatalf("composing a fleet node's file: %v", err)
	}
	out, err := ExportSection(after)
	if err != nil || !strings.HasPrefix(string(out), "services:\n") {
		t.Fatalf("export: %v\n%s", err, out)
	}
}
