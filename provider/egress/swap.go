package egress

// The swap reads the request as the sandbox wrote it: every header value (an
// Authorization of the Basic scheme decoded, since its placeholder is inside base64),
// the URL's user info, path and query. A request body is not read: a placeholder in a
// body reaches the host as the placeholder, which is worth nothing there.

import (
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
)

// ErrPlaceholder marks a request that carries a secret's placeholder to a host that is
// not one of the secret's hosts (403 to the sandbox).
var ErrPlaceholder = errors.New("a secret's placeholder is only sent to that secret's hosts")

// swapString replaces the placeholders in v of the secrets whose hosts include host
// with enc(value); a placeholder of any other secret is an error naming the secret.
// All placeholders are checked before any is replaced.
func (s *Secrets) swapString(v, host string, enc func(string) string) (string, int, error) {
	if s == nil || v == "" {
		return v, 0, nil
	}
	var hit []int
	for i := range s.list {
		if strings.Contains(v, s.list[i].placeholder) {
			if !s.list[i].allows(host) {
				return "", 0, fmt.Errorf("the placeholder of %s was sent to %s, not one of its hosts: %w", s.list[i].name, host, ErrPlaceholder)
			}
			hit = append(hit, i)
		}
	}
	for _, i := range hit {
		v = strings.ReplaceAll(v, s.list[i].placeholder, enc(s.list[i].value))
	}
	return v, len(hit), nil
}

func same(v string) string { return v }

// swapHeader swaps one header value; a Basic credential is decoded, swapped and
// encoded again.
func (s *Secrets) swapHeader(key, v, host string) (string, int, error) {
	out, n, err := s.swapString(v, host, same)
	if err != nil {
		return "", 0, err
	}
	if key != "Authorization" && key != "Proxy-Authorization" {
		return out, n, nil
	}
	scheme, cred, ok := strings.Cut(out, " ")
	if !ok || !strings.EqualFold(scheme, "basic") {
		return out, n, nil
	}
	raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(cred))
	if err != nil {
		return out, n, nil
	}
	dec, m, err := s.swapString(string(raw), host, same)
	if err != nil || m == 0 {
		return out, n, err
	}
	return scheme + " " + base64.StdEncoding.EncodeToString([]byte(dec)), n + m, nil
}

// swapRequest swaps r in place for a request to host (canonical, as ParseAuthority
// returns it): the placeholders of secrets whose hosts include host become values in
// the headers, the URL's user info, path and query; the placeholder of any other
// secret refuses the request (ErrPlaceholder). n counts the swaps.
func (s *Secrets) swapRequest(r *http.Request, host string) (n int, err error) {
	if s == nil {
		return 0, nil
	}
	for k, vs := range r.Header {
		for i, v := range vs {
			out, m, err := s.swapHeader(k, v, host)
			if err != nil {
				return 0, err
			}
			vs[i], n = out, n+m
		}
	}
	u := r.URL
	if u.User != nil {
		name, m, err := s.swapString(u.User.Username(), host, same)
		if err != nil {
			return 0, err
		}
		n += m
		if pw, ok := u.User.Password(); ok {
			if pw, m, err = s.swapString(pw, host, same); err != nil {
				return 0, err
			}
			u.User, n = url.UserPassword(name, pw), n+m
		} else {
			u.User = url.User(name)
		}
	}
	q, m, err := s.swapString(u.RawQuery, host, url.QueryEscape)
	if err != nil {
		return 0, err
	}
	u.RawQuery, n = q, n+m
	p, m, err := s.swapString(u.EscapedPath(), host, url.PathEscape)
	if err != nil {
		return 0, err
	}
	if m > 0 {
		dec, err := url.PathUnescape(p)
		if err != nil {
			return 0, fmt.Errorf("unescape the swapped path: %w", err)
		}
		u.Path, u.RawPath, n = dec, p, n+m
	}
	return n, nil
}
