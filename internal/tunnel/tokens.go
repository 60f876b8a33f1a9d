package tunnel

import (
	"crypto/sha256"
	"encoding/hex"
	"regexp"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"
)

// MinTokenLen is the shortest token the edge accepts: a token is the only secret
// between the internet and the services it may serve (openssl rand -hex 32 makes one).
const MinTokenLen = 16

// A Token lets a connector serve the services named in its scope.
type Token struct {
	secret   string
	Services []string
}

// Fingerprint names the token in logs and status without giving it away: the first
// 12 hex digits of its SHA-256.
func (t Token) Fingerprint() string { return fingerprint(t.secret) }

func fingerprint(secret string) string {
	sum := sha256.Sum256([]byte(secret))
	return "sha256:" + hex.EncodeToString(sum[:6])
}

// serviceName is internal/config's rule for service names: the edge serves a tunnel
// service under the name of the node's service.
var serviceName = regexp.MustCompile(`^[a-zA-Z0-9._-]{1,63}$`)

// LoadTokens reads the edge's tokens file, a YAML list of
// `{token: "...", services: [web, api]}`.
func LoadTokens(path string) ([]Token, error) {
	y := &yamlFile{name: path}
	data, ok := y.readFile(0, "", path)
	if !ok {
		return nil, y.err()
	}
	return ParseTokens(path, data)
}

// ParseTokens parses a tokens file; file is used only in error messages. Any problem
// fails the whole file: an edge does not run with half of its tokens.
func ParseTokens(file string, data []byte) ([]Token, error) {
	y := &yamlFile{name: file}
	root := y.document(data)
	if root == nil {
		return nil, y.err()
	}
	entries, ok := y.sequence(root, "")
	if !ok {
		return nil, y.err()
	}
	var tokens []Token
	first := map[string]string{}
	for i, n := range entries {
		path := index("", i)
		fields, ok := y.mapping(n, path, "token", "services")
		if !ok {
			continue
		}
		var t Token
		if v := fields["token"]; v == nil {
			y.add(n.Line, join(path, "token"), "required")
		} else if s, ok := y.text(v, join(path, "token")); ok {
			switch {
			case len(s) < MinTokenLen:
				y.add(v.Line, join(path, "token"), "too short: at least %d characters (openssl rand -hex 32 makes one)", MinTokenLen)
			case strings.ContainsFunc(s, func(r rune) bool { return r <= ' ' || r == 0x7f }):
				y.add(v.Line, join(path, "token"), "must not contain whitespace or control characters")
			case first[s] != "":
				y.add(v.Line, join(path, "token"), "same token as %s: a token has one scope", first[s])
			default:
				first[s] = join(path, "token")
				t.secret = s
			}
		}
		if v := fields["services"]; v == nil {
			y.add(n.Line, join(path, "services"), "required")
		} else {
			t.Services = y.serviceNames(v, join(path, "services"))
		}
		tokens = append(tokens, t)
	}
	if len(entries) == 0 {
		y.add(root.Line, "", "the file lists no token")
	}
	if err := y.err(); err != nil {
		return nil, err
	}
	return tokens, nil
}

func (y *yamlFile) serviceNames(n *yaml.Node, path string) []string {
	items := y.list(n, path, "service")
	var names []string
	for i, item := range items {
		s, ok := y.text(item, index(path, i))
		switch {
		case !ok:
		case !serviceName.MatchString(s):
			y.add(item.Line, index(path, i), "%q is not a service name (1..63 of a-z A-Z 0-9 . _ -)", s)
		case slices.Contains(names, s):
			y.add(item.Line, index(path, i), "%s is listed twice", s)
		default:
			names = append(names, s)
		}
	}
	return names
}

// tokenSet finds a token by its secret. It is keyed by the secret's hash, so that the
// lookup's timing says nothing about how much of a wrong token was right.
type tokenSet map[[sha256.Size]byte]Token

func newTokenSet(tokens []Token) tokenSet {
	s := tokenSet{}
	for _, t := range tokens {
		s[sha256.Sum256([]byte(t.secret))] = t
	}
	return s
}

func (s tokenSet) lookup(secret string) (Token, bool) {
	t, ok := s[sha256.Sum256([]byte(secret))]
	return t, ok
}
