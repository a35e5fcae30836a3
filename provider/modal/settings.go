package modal

// The Modal settings of the host: token shapes, the app name and the image a
// sandbox starts from.

import (
	"errors"
	"regexp"
	"strings"

	"github.com/proliferate-ai/sandbox-mcp/provider"
)

// NormalizeEnvValue trims a Modal setting and removes one pair of matching quotes
// around it (as pasted from a .env file); ok is false when nothing is left.
func NormalizeEnvValue(v string) (string, bool) {
	v = strings.TrimSpace(v)
	if len(v) >= 2 && (v[0] == '"' && v[len(v)-1] == '"' || v[0] == '\'' && v[len(v)-1] == '\'') {
		v = strings.TrimSpace(v[1 : len(v)-1])
	}
	return v, v != ""
}

var (
	tokenIDShape     = regexp.MustCompile(`^ak-[a-zA-Z0-9_-]+$`)
	tokenSecretShape = regexp.MustCompile(`^as-[a-zA-Z0-9_-]+$`)
)

// LooksLikeTokenID reports whether v has the shape of a Modal token id (ak-…).
func LooksLikeTokenID(v string) bool { return tokenIDShape.MatchString(v) }

// LooksLikeTokenSecret reports whether v has the shape of a Modal token secret (as-…).
func LooksLikeTokenSecret(v string) bool { return tokenSecretShape.MatchString(v) }

// AuthConfigHint explains what is wrong with a Modal token pair, or "" when
// nothing is: swapped values, mis-shaped values, missing values, in that order.
func AuthConfigHint(id, secret string) string {
	var hints []string
	if strings.HasPrefix(id, "as-") && strings.HasPrefix(secret, "ak-") {
		hints = append(hints, "MODAL_TOKEN_ID and MODAL_TOKEN_SECRET look swapped.")
	}
	if id != "" && !LooksLikeTokenID(id) {
		hints = append(hints, "MODAL_TOKEN_ID should look like 'ak-...'.")
	}
	if secret != "" && !LooksLikeTokenSecret(secret) {
		hints = append(hints, "MODAL_TOKEN_SECRET should look like 'as-...'.")
	}
	if id == "" || secret == "" {
		hints = append(hints, "Set MODAL_TOKEN_ID and MODAL_TOKEN_SECRET (or run `modal setup` to create ~/.modal.toml).")
	}
	return strings.Join(hints, " ")
}

// AuthPreflight is the check before any Modal API call: when either value is
// set and either is mis-shaped, a non-retryable error with the hint.
func AuthPreflight(id, secret string) error {
	if id == "" && secret == "" {
		return nil
	}
	if LooksLikeTokenID(id) && LooksLikeTokenSecret(secret) {
		return nil
	}
	return provider.NewProviderError(provider.KindModal, provider.OpHealth, AuthConfigHint(id, secret), false, nil)
}

// AppName is MODAL_APP_NAME, suffixed with -MODAL_APP_SUFFIX when set.
func AppName(getenv func(string) string) (string, error) {
	name, ok := NormalizeEnvValue(getenv(provider.EnvModalAppName))
	if !ok {
		return "", errors.New("MODAL_APP_NAME is required to use the Modal provider")
	}
	if suffix, ok := NormalizeEnvValue(getenv(provider.EnvModalAppSuffix)); ok {
		return name + "-" + suffix, nil
	}
	return name, nil
}

// ImageSource says which image a Modal sandbox starts from.
type ImageSource struct {
	// Kind is "snapshot" (restore), "base-snapshot" (base layer, still cloning) or
	// "base-image" (resolved by the deployed get_image_id endpoint).
	Kind string
	// ID is the snapshot id; empty for "base-image".
	ID string
}

// PickImageSource picks the image of a Modal sandbox: the restore snapshot, else
// the base snapshot (the options' or MODAL_BASE_SNAPSHOT_ID), else the base image.
func PickImageSource(opts provider.CreateOptions, getenv func(string) string) ImageSource {
	if opts.SnapshotID != "" {
		return ImageSource{Kind: "snapshot", ID: opts.SnapshotID}
	}
	if opts.BaseSnapshotID != "" {
		return ImageSource{Kind: "base-snapshot", ID: opts.BaseSnapshotID}
	}
	if id, ok := NormalizeEnvValue(getenv(provider.EnvModalBaseSnapshotID)); ok {
		return ImageSource{Kind: "base-snapshot", ID: id}
	}
	return ImageSource{Kind: "base-image"}
}
