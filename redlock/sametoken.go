package redlock

import (
	"context"
	"fmt"
)

// sameTokenKey is the context key of withSameToken.
type sameTokenKey struct{}

// withSameToken makes the Acquire called with the returned context use
// token instead of a new one: Moving locks a moved key in two groups under
// one token, so that a release or extend naming that token (all the HTTP
// API hands out) reaches both. Only Moving uses it, for a token that a
// Client of this process generated for the same key moments before; a
// token must never be reused across keys or lockers (TokenGenerator).
func withSameToken(ctx context.Context, token string) context.Context {
	return context.WithValue(ctx, sameTokenKey{}, token)
}

// handedOver reports whether ctx carries withSameToken's token: another
// Client drew it, and may have sent calls with it (unreached.go).
func handedOver(ctx context.Context) bool {
	_, ok := ctx.Value(sameTokenKey{}).(string)
	return ok
}

// tokenFor is the token of an acquire attempt: withSameToken's, else a new
// one from the Client's TokenGenerator.
func (c *Client) tokenFor(ctx context.Context) (string, error) {
	if t, ok := ctx.Value(sameTokenKey{}).(string); ok {
		if t == "" {
			return "", fmt.Errorf("%w: empty token", ErrInvalid)
		}
		return t, nil
	}
	t, err := c.opts.token()
	switch {
	case err != nil:
		return "", fmt.Errorf("%w: token generator: %w", ErrNotObtained, err)
	case t == "":
		return "", fmt.Errorf("%w: token generator: it returned an empty token", ErrNotObtained)
	}
	return t, nil
}
