package link

import (
	"crypto/ecdh"
	"encoding/base64"
	"encoding/hex"
	"log/slog"

	"github.com/manifoldlb/manifold/internal/config"
	"github.com/manifoldlb/manifold/internal/secretfile"
)

// readPrivateKey reads a WireGuard private key file (wg genkey) as a secret: bounded,
// with a warning when others can read it. Its errors name the field and never quote
// the file's contents.
func readPrivateKey(file, path string, log *slog.Logger) (priv, pub [32]byte, err error) {
	fail := func(msg string) error {
		return config.Errors{{File: file, Field: "link.private_key_file", Msg: msg}}
	}
	data, err := secretfile.Read(path, log)
	if err != nil {
		return priv, pub, fail(err.Error())
	}
	priv, err = config.ParseWireGuardKey(string(data))
	if err != nil {
		return priv, pub, fail(path + " holds " + err.Error())
	}
	k, err := ecdh.X25519().NewPrivateKey(priv[:])
	if err != nil {
		return priv, pub, fail(path + ": " + err.Error())
	}
	copy(pub[:], k.PublicKey().Bytes())
	return priv, pub, nil
}

func b64(k [32]byte) string { return base64.StdEncoding.EncodeToString(k[:]) }

func hexKey(k [32]byte) string { return hex.EncodeToString(k[:]) }
