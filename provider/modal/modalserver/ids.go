package modalserver

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
)

const base62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"

// crockford is the ULID alphabet of Modal's V2 sandbox ids.
const crockford = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"

// newID returns prefix-<22 base62 characters>, the shape of Modal's object ids
// (sb-, ap-, im-, ta-, st-). A V1 sandbox id has exactly this shape.
func newID(prefix string) string {
	b := make([]byte, 22)
	rand.Read(b)
	for i := range b {
		b[i] = base62[int(b[i])%len(base62)]
	}
	return prefix + "-" + string(b)
}

// stableID is an id of the same shape derived from key, for objects that are found
// by name (apps, registry images): the same name gives the same id after a restart.
func stableID(prefix, key string) string {
	sum := sha256.Sum256([]byte(key))
	b := make([]byte, 22)
	for i := range b {
		b[i] = base62[int(sum[i])%len(base62)]
	}
	return prefix + "-" + string(b)
}

// newV2SandboxID returns sb-<ULID>, the shape the SDKs route to the V2 sandbox
// calls: a 48-bit millisecond timestamp then 80 random bits, Crockford base32.
func newV2SandboxID(now time.Time) string {
	var raw [16]byte
	ms := uint64(now.UnixMilli())
	for i := 5; i >= 0; i-- {
		raw[i] = byte(ms)
		ms >>= 8
	}
	rand.Read(raw[6:])
	// 128 bits as 26 base32 digits, the first carrying the top 3 bits.
	out := make([]byte, 26)
	var hi, lo uint64
	for i := 0; i < 8; i++ {
		hi = hi<<8 | uint64(raw[i])
		lo = lo<<8 | uint64(raw[8+i])
	}
	for i := 25; i >= 0; i-- {
		out[i] = crockford[lo&31]
		lo = lo>>5 | (hi&31)<<59
		hi >>= 5
	}
	return "sb-" + string(out)
}

// isV1SandboxID mirrors the SDKs' routing rule: sb- plus 22 base62 characters.
func isV1SandboxID(id string) bool {
	suffix, ok := strings.CutPrefix(id, "sb-")
	if !ok || len(suffix) != 22 {
		return false
	}
	for _, c := range suffix {
		if !strings.ContainsRune(base62, c) {
			return false
		}
	}
	return true
}

// tokens signs and checks the JWTs the server hands out: the control plane's auth
// token and the command router's access token. The SDKs only read their exp claim;
// the server checks the signature on every command router call.
type tokens struct {
	key []byte
	ttl time.Duration
	now func() time.Time
}

func newTokens(ttl time.Duration, now func() time.Time) *tokens {
	key := make([]byte, 32)
	rand.Read(key)
	return &tokens{key: key, ttl: ttl, now: now}
}

type claims struct {
	Sub string `json:"sub"`
	Exp int64  `json:"exp"`
}

var b64 = base64.RawURLEncoding

func (t *tokens) sign(sub string) string {
	head := b64.EncodeToString([]byte(`{"alg":"HS256","typ":"JWT"}`))
	body, _ := json.Marshal(claims{Sub: sub, Exp: t.now().Add(t.ttl).Unix()})
	msg := head + "." + b64.EncodeToString(body)
	return msg + "." + b64.EncodeToString(t.mac(msg))
}

func (t *tokens) mac(msg string) []byte {
	m := hmac.New(sha256.New, t.key)
	m.Write([]byte(msg))
	return m.Sum(nil)
}

// check returns the subject of a valid, unexpired token.
func (t *tokens) check(jwt string) (string, error) {
	parts := strings.Split(jwt, ".")
	if len(parts) != 3 {
		return "", errors.New("malformed token")
	}
	sig, err := b64.DecodeString(parts[2])
	if err != nil || !hmac.Equal(sig, t.mac(parts[0]+"."+parts[1])) {
		return "", errors.New("bad token signature")
	}
	body, err := b64.DecodeString(parts[1])
	if err != nil {
		return "", errors.New("malformed token")
	}
	var c claims
	if err := json.Unmarshal(body, &c); err != nil {
		return "", errors.New("malformed token")
	}
	if t.now().Unix() >= c.Exp {
		return "", fmt.Errorf("token expired")
	}
	return c.Sub, nil
}
