package tunnel

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"log/slog"
	"regexp"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"
)

// MinTokenLen is the shortest token the edge accepts: a token is the only secret
// between the internet and the services it may serve (openssl rand -hex 32 makes one).
const MinTokenLen = 16

// hashPrefix marks an entry of the tokens file that holds the token's SHA-256 in hex
// rather than the token: the edge needs only the hash, and a file of hashes that
// leaks gives no connector's token away. `printf %s TOKEN | sha256sum` makes one.
const hashPrefix = "sha256:"

// A Token lets a connector serve the services named in its scope, for the origins
// it names (none: the token's connectors name no origin).
type Token struct {
	hash     [sha256.Size]byte // of the secret: all the edge keeps of it
	Services []string
	Origins  []string
}

// Fingerprint names the token in logs and status without giving it away: the first
// 12 hex digits of its SHA-256.
func (t Token) Fingerprint() string { return fingerprintOf(t.hash) }

func fingerprint(secret string) string { return fingerprintOf(sha256.Sum256([]byte(secret))) }

func fingerprintOf(hash [sha256.Size]byte) string { return hashPrefix + hex.EncodeToString(hash[:6]) }

// serviceName is internal/config's rule for service names: the edge serves a tunnel
// service under the name of the node's service.
var serviceName = regexp.MustCompile(`^[a-zA-Z0-9._-]{1,63}$`)

// LoadTokens reads the edge's tokens file, a YAML list of
// `{token: "...", services: [web, api], origins: [home]}` (a token or "sha256:" and
// its hash; origins optional), and
// warns on log when others may read it.
func LoadTokens(path string, log *slog.Logger) ([]Token, error) {
	y := &yamlFile{name: path, log: log}
	data, ok := y.readSecret(0, "", path)
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
	first := map[[sha256.Size]byte]string{}
	for i, n := range entries {
		path := index("", i)
		fields, ok := y.mapping(n, path, "token", "services", "origins")
		if !ok {
			continue
		}
		var t Token
		if v := fields["token"]; v == nil {
			y.add(n.Line, join(path, "token"), "required")
		} else if s, ok := y.text(v, join(path, "token")); ok {
			hash, hashed := parseHash(s)
			switch {
			case strings.HasPrefix(s, hashPrefix) && !hashed:
				y.add(v.Line, join(path, "token"), "%s and the token's SHA-256 in %d hex digits (printf %%s TOKEN | sha256sum makes it)",
					hashPrefix, 2*sha256.Size)
			case !hashed && len(s) < MinTokenLen:
				y.add(v.Line, join(path, "token"), "too short: at least %d characters (openssl rand -hex 32 makes one)", MinTokenLen)
			case strings.ContainsFunc(s, func(r rune) bool { return r <= ' ' || r == 0x7f }):
				y.add(v.Line, join(path, "token"), "must not contain whitespace or control characters")
			case first[hash] != "":
				y.add(v.Line, join(path, "token"), "same token as %s: a token has one scope", first[hash])
			default:
				first[hash] = join(path, "token")
				t.hash = hash
			}
		}
		if v := fields["services"]; v == nil {
			y.add(n.Line, join(path, "services"), "required")
		} else {
			t.Services = y.names(v, join(path, "services"), "service")
		}
		if v := fields["origins"]; v != nil {
			t.Origins = y.names(v, join(path, "origins"), "origin")
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

// names reads a list of service or origin names (what says which): the same rule
// for both, internal/config's.
func (y *yamlFile) names(n *yaml.Node, path, what string) []string {
	items := y.list(n, path, what)
	var names []string
	for i, item := range items {
		s, ok := y.text(item, index(path, i))
		switch {
		case !ok:
		case !serviceName.MatchString(s):
			y.add(item.Line, index(path, i), "%q is not %s name (1..63 of a-z A-Z 0-9 . _ -)", s, article(what))
		case slices.Contains(names, s):
			y.add(item.Line, index(path, i), "%s is listed twice", s)
		default:
			names = append(names, s)
		}
	}
	return names
}

// article is "a service", "an origin".
func article(noun string) string {
	if strings.ContainsRune("aeiou", rune(noun[0])) {
		return "an " + noun
	}
	return "a " + noun
}

// parseHash returns the hash an entry of the tokens file gives: the token's own, or
// the one written after hashPrefix; hashed says it was written so.
func parseHash(entry string) (hash [sha256.Size]byte, hashed bool) {
	if hexHash, ok := strings.CutPrefix(entry, hashPrefix); ok {
		b, err := hex.DecodeString(hexHash)
		if err != nil || len(b) != sha256.Size {
			return hash, false
		}
		return [sha256.Size]byte(b), true
	}
	return sha256.Sum256([]byte(entry)), false
}

// tokenSet finds a token by its secret: the secret's SHA-256 is compared with every
// token's hash, each in constant time and all of them every time, so that the
// lookup's timing says nothing about how much of a wrong token was right, nor which
// token matched.
type tokenSet []Token

func (s tokenSet) lookup(secret string) (Token, bool) {
	hash := sha256.Sum256([]byte(secret))
	var found Token
	ok := false
	for _, t := range s {
		if subtle.ConstantTimeCompare(hash[:], t.hash[:]) == 1 {
			found, ok = t, true
		}
	}
	return found, ok
}
