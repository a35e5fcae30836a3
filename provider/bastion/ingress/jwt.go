package ingress

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
)

// maxJWTBytes bounds a token before any decoding.
const maxJWTBytes = 8 << 10

// VerifyJWT checks that token is a compact HS256 JWT signed with key whose
// exp (required) is after now. Only HS256 is accepted: the header's alg
// cannot choose another algorithm (none, or RS256 with the key as a public
// key).
func VerifyJWT(token string, key []byte, now time.Time) error {
	if len(token) > maxJWTBytes {
		return errors.New("jwt: token too long")
	}
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return errors.New("jwt: want three dot-separated parts")
	}
	var header struct {
		Alg string `json:"alg"`
		Typ string `json:"typ"`
	}
	if err := decodePart(parts[0], &header); err != nil {
		return fmt.Errorf("jwt: header: %w", err)
	}
	if header.Alg != "HS256" {
		return fmt.Errorf("jwt: alg %q, want HS256", header.Alg)
	}
	sig, err := base64.RawURLEncoding.DecodeString(parts[2])
	if err != nil {
		return fmt.Errorf("jwt: signature: %w", err)
	}
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(parts[0] + "." + parts[1]))
	if !hmac.Equal(sig, mac.Sum(nil)) {
		return errors.New("jwt: bad signature")
	}
	var claims struct {
		Exp *json.Number `json:"exp"`
	}
	if err := decodePart(parts[1], &claims); err != nil {
		return fmt.Errorf("jwt: claims: %w", err)
	}
	if claims.Exp == nil {
		return errors.New("jwt: no exp claim")
	}
	exp, err := claims.Exp.Float64()
	if err != nil {
		return fmt.Errorf("jwt: exp: %w", err)
	}
	if float64(now.Unix()) >= exp {
		return errors.New("jwt: expired")
	}
	return nil
}

func decodePart(s string, v any) error {
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, v)
}

// SignJWT returns an HS256 JWT with claims signed with key: what the
// platform mints, and what tests use.
func SignJWT(claims map[string]any, key []byte) (string, error) {
	body, err := json.Marshal(claims)
	if err != nil {
		return "", fmt.Errorf("jwt: claims: %w", err)
	}
	s := base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"HS256","typ":"JWT"}`)) + "." + base64.RawURLEncoding.EncodeToString(body)
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(s))
	return s + "." + base64.RawURLEncoding.EncodeToString(mac.Sum(nil)), nil
}
