// Package redact hides the credentials a URL may carry before it is shown
// or logged.
package redact

import (
	"errors"
	"net/url"
	"strings"
)

// Mask stands for the hidden user information.
const Mask = "xxxxx"

// URL returns raw with its user information (user name and password, as in
// http://user:pass@host) replaced by xxxxx: http://xxxxx@host. The user
// name goes too, as it is often a token itself. A URL without user
// information comes back unchanged; one that does not parse but holds an
// '@' before its path comes back with everything between "//" and that '@'
// masked, so that a broken URL never echoes a password either.
func URL(raw string) string {
	if !strings.Contains(raw, "@") {
		return raw
	}
	u, err := url.Parse(raw)
	if err == nil {
		if u.User == nil {
			return raw
		}
		u.User = url.User(Mask)
		return u.String()
	}
	// Unparsable: mask by hand between the scheme's "//" and the last '@'
	// of the authority.
	start := strings.Index(raw, "//")
	if start < 0 {
		start = 0
	} else {
		start += 2
	}
	end := len(raw)
	if i := strings.IndexAny(raw[start:], "/?#"); i >= 0 {
		end = start + i
	}
	at := strings.LastIndex(raw[start:end], "@")
	if at < 0 {
		return raw
	}
	return raw[:start] + Mask + raw[start+at:]
}

// ParseError returns the reason inside an error of url.Parse, without the
// URL (a *url.Error quotes it whole, credentials included); other errors
// come back as they are.
func ParseError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}
