package provider

import (
	"errors"
	"regexp"
	"strings"
)

// NormalizeModalEnvValue trims a Modal setting and removes one pair of matching quotes
// around it (as pasted from a .env file); ok is false when nothing is left.
func NormalizeModalEnvValue(v string) (string, bool) {
	v = strings.TrimSpace(v)
	if len(v) >= 2 && (v[0] == '"' && v[len(v)-1] == '"' || v[0] == '\'' && v[len(v)-1] == '\'') {
		v = strings.TrimSpace(v[1 : len(v)-1])
	}
	return v, v != ""
}

var (
	modalTokenID     = regexp.MustCompile(`^ak-[a-zA-Z0-9_-]+$`)
	modalTokenSecret = regexp.MustCompile(`^as-[a-zA-Z0-9_-]+$`)
)

// LooksLikeModalTokenID reports whether v has the shape of a Modal token id (ak-…).
func LooksLikeModalTokenID(v string) bool { return modalTokenID.MatchString(v) }

// LooksLikeModalTokenSecret reports whether v has the shape of a Modal token secret (as-…).
func LooksLikeModalTokenSecret(v string) bool { return modalTokenSecret.MatchString(v) }

// ModalAuthConfigHint explains what is wrong with a Modal token pair, or "" when
// nothing is: swapped values, mis-shaped values, missing values, in that order.
func ModalAuthConfigHint(id, secret string) string {
	var hints []string
	if strings.HasPrefix(id, "as-") && strings.HasPrefix(secret, "ak-") {
		hints = append(hints, "MODAL_TOKEN_ID and MODAL_TOKEN_SECRET look swapped.")
	}
	if id != "" && !LooksLikeModalTokenID(id) {
		hints = append(hints, "MODAL_TOKEN_ID should look like 'ak-...'.")
	}
	if secret != "" && !LooksLikeModalTokenSecret(secret) {
		hints = append(hints, "MODAL_TOKEN_SECRET should look like 'as-...'.")
	}
	if id == "" || secret == "" {
		hints = append(hints, "Set MODAL_TOKEN_ID and MODAL_TOKEN_SECRET (or run `modal setup` to create ~/.modal.toml).")
	}
	return strings.Join(hints, " ")
}

// ModalAuthPreflight is the check before any Modal API call: when either value is
// set and either is mis-shaped, a non-retryable error with the hint.
func ModalAuthPreflight(id, secret string) error {
	if id == "" && secret == "" {
		return nil
	}
	if LooksLikeModalTokenID(id) && LooksLikeModalTokenSecret(secret) {
		return nil
	}
	return NewProviderError(KindModal, OpHealth, ModalAuthConfigHint(id, secret), false, nil)
}

// ModalAppName is MODAL_APP_NAME, suffixed with -MODAL_APP_SUFFIX when set.
func ModalAppName(getenv func(string) string) (string, error) {
	name, ok := NormalizeModalEnvValue(getenv("MODAL_APP_NAME"))
	if !ok {
		return "", errors.New("MODAL_APP_NAME is required to use the Modal provider")
	}
	if suffix, ok := NormalizeModalEnvValue(getenv("MODAL_APP_SUFFIX")); ok {
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

// ModalImageSource picks the image of a Modal sandbox: the restore snapshot, else
// the base snapshot (the options' or MODAL_BASE_SNAPSHOT_ID), else the base image.
func ModalImageSource(opts CreateOptions, getenv func(string) string) ImageSource {
	if opts.SnapshotID != "" {
		return ImageSource{Kind: "snapshot", ID: opts.SnapshotID}
	}
	if opts.BaseSnapshotID != "" {
		return ImageSource{Kind: "base-snapshot", ID: opts.BaseSnapshotID}
	}
	if id, ok := NormalizeModalEnvValue(getenv("MODAL_BASE_SNAPSHOT_ID")); ok {
		return ImageSource{Kind: "base-snapshot", ID: id}
	}
	return ImageSource{Kind: "base-image"}
}
