package config

import (
	"crypto/tls"
	"encoding/pem"
	"errors"
	"io"
	"io/fs"
	"os"
	"strings"
)

// Validate is `manifold validate` of a node, backend agent, steering controller or link
// file (told apart by KindOf; a connector's file is its package's): the file parsed and
// checked as its kind's Parse does, and every file it names (certificates, keys,
// tokens, passwords) there and readable by this user, of the kind its field says
// (Field.File), as the process that runs it reads them at start. Parse leaves them
// alone: a file may be checked on another host than it runs on. file is the config
// file's path: a relative path in it is relative to its directory.
func Validate(file string, data []byte) error {
	p := newParser(file)
	p.checkFiles, p.files = true, map[string]namedFile{}
	// the parse's problems are p.errs, with the files' problems found on the way
	switch KindOf(data) {
	case BackendFile:
		_, _ = parseBackend(p, data)
	case SteerFile:
		_, _ = parseSteer(p, data)
	case LinkFile:
		_, _ = parseLink(p, data)
	default:
		_, _, _ = parseNode(p, data)
	}
	p.checkKeyPairs()
	return p.errs.sorted()
}

// namedFile is a file the config names that passed checkFile.
type namedFile struct {
	path string
	line int
}

// checkKeyPairs reports a key file whose key is not that of the certificate beside it
// (X.cert_file with X.key_file), once both files passed their own check.
func (p *parser) checkKeyPairs() {
	for field, cert := range p.files {
		prefix, ok := strings.CutSuffix(field, "cert_file")
		key, found := p.files[prefix+"key_file"]
		if !ok || !found {
			continue
		}
		if _, err := tls.LoadX509KeyPair(cert.path, key.path); err != nil {
			p.add(key.line, prefix+"key_file", "%s is not the key of %s (%s): %v", key.path, cert.path, field, err)
		}
	}
}

// fileKinds is the kind of every field that names a file, by path, of every schema.
var fileKinds = func() map[string]FileKind {
	out := map[string]FileKind{}
	for _, schema := range [][]Field{NodeSchema, BackendSchema, SteerSchema, LinkSchema} {
		for _, f := range schema {
			if f.File != NoFile {
				out[f.Path] = f.File
			}
		}
	}
	return out
}()

// maxNamedFile bounds what is read of a named file to check it: the largest of them,
// a tokens file or a certificate chain, is far smaller.
const maxNamedFile = 4 << 20

// checkFile reports at the field's line why the file at path (as resolved: PathBeside)
// cannot be what the field names: missing, a directory, unreadable by this user,
// empty, or not the PEM it must be.
func (p *parser) checkFile(line int, field, path string) {
	fail := func(format string, args ...any) { p.add(line, field, format, args...) }
	info, err := os.Stat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		fail("%s does not exist", path)
		return
	case err != nil:
		fail("%s cannot be read: %v", path, pathCause(err))
		return
	case info.IsDir():
		fail("%s is a directory, not a file", path)
		return
	}
	f, err := os.Open(path)
	if err != nil {
		fail("%s cannot be read by this user (uid %d): %v (mode %v%s)", path, os.Getuid(), pathCause(err), info.Mode().Perm(), owner(info))
		return
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxNamedFile))
	if err != nil {
		fail("%s cannot be read: %v", path, pathCause(err))
		return
	}
	if strings.TrimSpace(string(data)) == "" {
		fail("%s is empty", path)
		return
	}
	switch fileKinds[field] {
	case FileCertificate:
		if !hasPEM(data, func(t string) bool { return t == "CERTIFICATE" }) {
			fail("%s holds no PEM certificate (a DER file? openssl x509 -in %s -out %s.pem makes it PEM)", path, path, path)
			return
		}
	case FilePrivateKey:
		if !hasPEM(data, func(t string) bool { return strings.HasSuffix(t, "PRIVATE KEY") }) {
			fail("%s holds no PEM private key", path)
			return
		}
	}
	p.files[field] = namedFile{path: path, line: line}
}

// hasPEM tells whether data holds a PEM block of a type that is.
func hasPEM(data []byte, is func(blockType string) bool) bool {
	for {
		var b *pem.Block
		b, data = pem.Decode(data)
		if b == nil {
			return false
		}
		if is(b.Type) {
			return true
		}
	}
}

// pathCause is an error on a path without the path (the message names it once).
func pathCause(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}
