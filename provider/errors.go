package provider

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"strings"
	"syscall"
)

// Redacted replaces every secret RedactSecrets finds.
const Redacted = "[REDACTED]"

// redactPatterns are applied in this order; later patterns see earlier replacements.
// They are immutable after initialisation.
//
// Patterns 6 and 7 (Modal token ids "ak-…" and secrets "as-…") also match inside
// ordinary words ("has-value" becomes "h[REDACTED]"). That over-redaction is kept on
// purpose: a readable error is worth less than a leaked token, and the two prefixes
// have no other reliable shape to anchor on.
var redactPatterns = []*regexp.Regexp{
	regexp.MustCompile(`sk-ant-[a-zA-Z0-9_-]+`),
	regexp.MustCompile(`(?i)api[_-]?key[=:]\s*["']?[a-zA-Z0-9_-]+["']?`),
	regexp.MustCompile(`Bearer\s+[a-zA-Z0-9_.-]+`),
	regexp.MustCompile(`gh[pousr]_[a-zA-Z0-9]+`),
	regexp.MustCompile(`x-access-token:[^@]+@`),
	regexp.MustCompile(`ak-[a-zA-Z0-9_-]+`),
	regexp.MustCompile(`as-[a-zA-Z0-9_-]+`),
	regexp.MustCompile(`(?i)e2b_[a-zA-Z0-9]+`),
	regexp.MustCompile(`eyJ[a-zA-Z0-9_-]+\.eyJ[a-zA-Z0-9_-]+\.[a-zA-Z0-9_-]+`),
	regexp.MustCompile(`:[^:@\s]{20,}@`),
}

// RedactSecrets replaces API keys, tokens, JWTs and URL passwords in text with
// [REDACTED].
//
// The ordered pattern list is applied until nothing changes. One pass, as in the old
// code, is not idempotent: a replacement can join the text around it into a new
// "user:password@" match (":abc:<20 chars>@defghij@" needs two passes), and a caller
// that redacts an already redacted message must get the same text back. Only the
// password and clone-URL patterns can match across "[REDACTED]" and both consume an
// '@', so the loop ends after at most one pass per '@' plus one.
func RedactSecrets(text string) string {
	for range strings.Count(text, "@") + 2 {
		next := text
		for _, re := range redactPatterns {
			next = re.ReplaceAllLiteralString(next, Redacted)
		}
		if next == text {
			break
		}
		text = next
	}
	return text
}

// Kind names a sandbox provider implementation.
type Kind string

// Known provider kinds.
const (
	KindModal Kind = "modal"
	KindE2B   Kind = "e2b"
	KindLocal Kind = "local"
)

// Operation names the provider operation an error came from.
type Operation string

// Provider operations.
const (
	OpCreateSandbox             Operation = "createSandbox"
	OpSnapshot                  Operation = "snapshot"
	OpTerminate                 Operation = "terminate"
	OpPause                     Operation = "pause"
	OpWriteEnvFile              Operation = "writeEnvFile"
	OpHealth                    Operation = "health"
	OpCheckSandboxes            Operation = "checkSandboxes"
	OpResolveTunnels            Operation = "resolveTunnels"
	OpReadFiles                 Operation = "readFiles"
	OpTestServiceCommands       Operation = "testServiceCommands"
	OpExecCommand               Operation = "execCommand"
	OpMemorySnapshot            Operation = "memorySnapshot"
	OpRestoreFromMemorySnapshot Operation = "restoreFromMemorySnapshot"
)

// ProviderError is every error a provider returns: which provider and operation, the
// HTTP status if there was one, whether retrying can help, and a message whose secrets
// are redacted.
type ProviderError struct {
	Provider   Kind
	Operation  Operation
	StatusCode int // 0 when the error did not come from an HTTP response
	Retryable  bool
	// Raw is the decoded response body (map or string) or the original error.
	Raw any
	// Message is "[provider:operation] <redacted message>".
	Message string
	cause   error
}

// NewProviderError builds a ProviderError; message is redacted. cause may be nil.
func NewProviderError(provider Kind, op Operation, message string, retryable bool, cause error) *ProviderError {
	return &ProviderError{
		Provider:  provider,
		Operation: op,
		Retryable: retryable,
		Message:   "[" + string(provider) + ":" + string(op) + "] " + RedactSecrets(message),
		cause:     cause,
	}
}

// Error returns the redacted message.
func (e *ProviderError) Error() string { return e.Message }

// Unwrap returns the cause.
func (e *ProviderError) Unwrap() error { return e.cause }

// IsRetryableStatus reports whether an HTTP status is worth retrying: 429, 502, 503, 504.
func IsRetryableStatus(status int) bool {
	switch status {
	case http.StatusTooManyRequests, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return true
	}
	return false
}

// maxResponseText is how much of a non-JSON body becomes the message.
const maxResponseText = 500

// FromResponseBody builds the error of a non-2xx response from its status and body: the
// first non-empty of error, message or detail of a JSON object, else the object itself,
// else the first 500 bytes of the text.
func FromResponseBody(status int, body []byte, provider Kind, op Operation) *ProviderError {
	var msg string
	var raw any
	var obj map[string]any
	if err := json.Unmarshal(body, &obj); err == nil && obj != nil {
		raw = obj
		msg = firstTruthy(obj, "error", "message", "detail")
		if msg == "" {
			b, _ := json.Marshal(obj)
			msg = string(b)
		}
	} else {
		raw = string(body)
		msg = truncateUTF8(string(body), maxResponseText)
	}
	e := NewProviderError(provider, op, fmt.Sprintf("HTTP %d: %s", status, msg), IsRetryableStatus(status), nil)
	e.StatusCode = status
	e.Raw = raw
	return e
}

// FromHTTPResponse reads resp's body (at most 1 MiB) and builds its error.
func FromHTTPResponse(resp *http.Response, provider Kind, op Operation) *ProviderError {
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return FromResponseBody(resp.StatusCode, body, provider, op)
}

func firstTruthy(obj map[string]any, keys ...string) string {
	for _, k := range keys {
		switch v := obj[k].(type) {
		case nil:
		case string:
			if v != "" {
				return v
			}
		case bool:
			if v {
				return "true"
			}
		case float64:
			if v != 0 {
				return fmt.Sprint(v)
			}
		default:
			b, _ := json.Marshal(v)
			return string(b)
		}
	}
	return ""
}

// retryableMarkers are the message substrings of transient network failures.
var retryableMarkers = []string{"ECONNREFUSED", "ETIMEDOUT", "ENOTFOUND", "fetch failed", "network", "timeout"}

// FromError wraps err as a ProviderError. An err that already is a *ProviderError is
// returned unchanged: the operation that failed first names the failure, and
// rewriting it at every layer would hide where it happened.
//
// Retryable when the message carries a transient-network marker, or, beyond the old
// substring rules, when err is a deadline, a refused connection or a net.Error timeout.
func FromError(err error, provider Kind, op Operation) *ProviderError {
	if pe, ok := err.(*ProviderError); ok {
		return pe
	}
	msg := "<nil>"
	if err != nil {
		msg = err.Error()
	}
	retry := false
	for _, m := range retryableMarkers {
		if strings.Contains(msg, m) {
			retry = true
			break
		}
	}
	var ne net.Error
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, syscall.ECONNREFUSED) || (errors.As(err, &ne) && ne.Timeout()) {
		retry = true
	}
	e := NewProviderError(provider, op, msg, retry, err)
	e.Raw = err
	return e
}

// IsProviderError reports whether err is, or wraps, a *ProviderError.
func IsProviderError(err error) bool {
	var pe *ProviderError
	return errors.As(err, &pe)
}
