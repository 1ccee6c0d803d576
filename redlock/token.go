package redlock

import (
	"crypto/rand"
	"encoding/hex"
)

// TokenGenerator returns a new lock token. Tokens must be unique across all
// clients for the life of any lock: the release and extend scripts trust a
// matching token as proof of ownership. An error or an empty token fails
// the Acquire that asked for it, with an error matching ErrNotObtained.
// Only lock tokens come from it: the Client's own bookkeeping values (the
// deployment marker) always take their randomness from crypto/rand.
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
