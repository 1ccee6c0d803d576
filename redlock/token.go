package redlock

import (
	"crypto/rand"
	"encoding/hex"
)

// TokenGenerator returns a new lock token. Tokens must be unique across all
// clients for the life of any lock: the release and extend scripts trust a
// matching token as proof of ownership.
type TokenGenerator func() (string, error)

// RandomToken returns 128 random bits from crypto/rand as 32 lowercase hex
// characters. It is the default TokenGenerator.
func RandomToken() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	return hex.EncodeToString(b[:]), nil
}
