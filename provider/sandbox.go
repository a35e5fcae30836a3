package provider

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/proliferate-ai/sandbox-mcp/provider/engine"
)

// RepoSpec is one repo to clone into the workspace.
type RepoSpec struct {
	RepoURL string `json:"repoUrl"`
	Token   string `json:"token,omitempty"`
	// WorkspacePath is the directory under the workspace; "." is the workspace itself.
	WorkspacePath string `json:"workspacePath"`
	RepoID        string `json:"repoId,omitempty"`
	// Branch overrides CreateOptions.Branch for this repo.
	Branch string `json:"branch,omitempty"`
	// BranchRequired fails the boot when Branch does not exist, instead of falling
	// back to the repo's default branch (sandboxctl create --repo URL#branch).
	BranchRequired  bool             `json:"branchRequired,omitempty"`
	ServiceCommands []ServiceCommand `json:"serviceCommands,omitempty"`
}

// SessionType is the kind of session; setup sessions get setup-only tools.
type SessionType string

// Session types.
const (
	SessionCoding SessionType = "coding"
	SessionSetup  SessionType = "setup"
	SessionCLI    SessionType = "cli"
)

// SessionKind is the newer classification of sessions (with the sandbox-agent boot).
type SessionKind string

// Session kinds.
const (
	SessionKindTask    SessionKind = "task"
	SessionKindSetup   SessionKind = "setup"
	SessionKindManager SessionKind = "manager"
)

// SecretFileWrite is a secret file written into the workspace.
type SecretFileWrite struct {
	FilePath string `json:"filePath"`
	Content  string `json:"content"`
}

// CreateOptions describe the sandbox to create or recover.
type CreateOptions struct {
	SessionID   string      `json:"sessionId"`
	SessionType SessionType `json:"sessionType,omitempty"`
	SessionKind SessionKind `json:"sessionKind,omitempty"`
	// Repos may be empty: a scratch session.
	Repos []RepoSpec `json:"repos"`
	// Branch is the default branch of every clone.
	Branch string `json:"branch,omitempty"`
	// EnvVars go into the sandbox env (see PrepareSandboxEnv).
	EnvVars      map[string]string `json:"envVars,omitempty"`
	SystemPrompt string            `json:"systemPrompt,omitempty"`
	// SnapshotID is the restore source; empty means a fresh sandbox.
	SnapshotID     string       `json:"snapshotId,omitempty"`
	BaseSnapshotID string       `json:"baseSnapshotId,omitempty"`
	AgentConfig    *AgentConfig `json:"agentConfig,omitempty"`
	// CurrentSandboxID is the sandbox the platform last knew for this session.
	CurrentSandboxID string          `json:"currentSandboxId,omitempty"`
	SSHPublicKey     string          `json:"sshPublicKey,omitempty"`
	TriggerContext   json.RawMessage `json:"triggerContext,omitempty"`
	// SnapshotHasDeps gates the automatic start of service commands.
	SnapshotHasDeps  bool                          `json:"snapshotHasDeps,omitempty"`
	ServiceCommands  []ConfigurationServiceCommand `json:"serviceCommands,omitempty"`
	EnvFiles         json.RawMessage               `json:"envFiles,omitempty"`
	SecretFileWrites []SecretFileWrite             `json:"secretFileWrites,omitempty"`
	// SnapshotRequired fails a restore whose snapshot cannot be used, instead of
	// making a fresh sandbox (RestoreFallback): sandboxctl create --snapshot.
	SnapshotRequired bool `json:"-"`
	// Spec is what this one sandbox asks of the engine (image, runtime, limits,
	// volumes, secrets, …); the boot adds its ports, egress and labels. An engine
	// that cannot honour a field refuses the create (engine.ErrUnsupported,
	// engine.ErrLimit) rather than ignore it.
	Spec engine.Spec `json:"-"`
}

// CreateResult is a booted sandbox.
type CreateResult struct {
	SandboxID string `json:"sandboxId"`
	// TunnelURL is OpenCode's URL; empty when OpenCode is not reachable.
	TunnelURL  string `json:"tunnelUrl"`
	PreviewURL string `json:"previewUrl"`
	// SandboxMCPURL is the sandbox-mcp API's URL when the provider can reach it directly.
	SandboxMCPURL string `json:"sandboxMcpUrl,omitempty"`
	SSHHost       string `json:"sshHost,omitempty"`
	SSHPort       int    `json:"sshPort,omitempty"`
	ExpiresAt     int64  `json:"expiresAt,omitempty"` // epoch milliseconds
	// RestoreFallback is set when a restore from CreateOptions.SnapshotID failed and a
	// fresh sandbox was created instead: why the restore failed (redacted). The old
	// code lost the snapshot silently.
	RestoreFallback string `json:"restoreFallback,omitempty"`
}

// EnsureResult is CreateResult plus whether a live sandbox was recovered.
type EnsureResult struct {
	CreateResult
	Recovered bool `json:"recovered"`
}

// SnapshotResult is a snapshot or pause id.
type SnapshotResult struct {
	SnapshotID string `json:"snapshotId"`
}

// Capabilities are the authoritative feature flags of a provider.
type Capabilities struct {
	SupportsPause          bool
	SupportsAutoPause      bool
	SupportsMemorySnapshot bool
}

// SandboxProvider creates, recovers, snapshots and terminates sandboxes. Every error is
// a *ProviderError. Implementations keep no state across calls that matters: all
// state lives in the sandbox, so a new instance per call is fine.
type SandboxProvider interface {
	// Kind names the provider.
	Kind() Kind
	// Capabilities are the provider's feature flags.
	Capabilities() Capabilities
	// EnsureSandbox recovers opts.CurrentSandboxID when it is alive, else creates.
	EnsureSandbox(ctx context.Context, opts CreateOptions) (EnsureResult, error)
	// CreateSandbox always creates, from opts.SnapshotID when set.
	CreateSandbox(ctx context.Context, opts CreateOptions) (CreateResult, error)
	// Snapshot takes a filesystem snapshot.
	Snapshot(ctx context.Context, sessionID, sandboxID string) (SnapshotResult, error)
	// Pause pauses the sandbox; providers without SupportsPause return a
	// non-retryable error.
	Pause(ctx context.Context, sessionID, sandboxID string) (SnapshotResult, error)
	// Terminate ends the sandbox; an already gone sandbox is success. An empty
	// sandboxID is an error ("sandboxId is required for terminate").
	Terminate(ctx context.Context, sessionID, sandboxID string) error
	// WriteEnvFile merges envVars into the sandbox's env override file.
	WriteEnvFile(ctx context.Context, sandboxID string, envVars map[string]string) error
	// Health reports whether the provider is usable; it never fails.
	Health(ctx context.Context) bool
}

// SandboxChecker is implemented by providers that can list live sandboxes without
// side effects (never resuming a paused one).
type SandboxChecker interface {
	// CheckSandboxes returns the ids of ids that are alive, in input order.
	CheckSandboxes(ctx context.Context, ids []string) ([]string, error)
}

// CommandExecer is implemented by providers that run commands in a sandbox.
type CommandExecer interface {
	// ExecCommand runs argv (no shell interpolation) in the sandbox.
	ExecCommand(ctx context.Context, sandboxID string, argv []string, o ExecOptions) (ExecResult, error)
}

// ExecOptions are the options of ExecCommand.
type ExecOptions struct {
	Cwd       string
	TimeoutMs int
	Env       []EnvPair
}

// ErrSandboxIDRequired is the message of Terminate without a sandbox id.
const ErrSandboxIDRequired = "sandboxId is required for terminate"

// MissingSandboxIDError is the error every provider returns from Terminate without an id.
func MissingSandboxIDError(k Kind) *ProviderError {
	return NewProviderError(k, OpTerminate, ErrSandboxIDRequired, false, nil)
}

// PauseUnsupportedError is the error of Pause on a provider without SupportsPause.
func PauseUnsupportedError(k Kind) *ProviderError {
	return NewProviderError(k, OpPause, fmt.Sprintf("pause is not supported for %s sandboxes", k), false, nil)
}

// IsNotFoundMessage reports whether a provider's error message says the sandbox is
// already gone, which makes Terminate succeed.
func IsNotFoundMessage(msg string) bool {
	return strings.Contains(msg, "not found") || strings.Contains(msg, "404") || strings.Contains(msg, "does not exist")
}

// Factory creates providers by kind. It holds no instances: New returns a fresh
// provider per call.
type Factory struct {
	// Default is used when New gets an empty kind (DEFAULT_SANDBOX_PROVIDER).
	Default Kind
	// Constructors build each known kind.
	Constructors map[Kind]func() (SandboxProvider, error)
}

// New returns a new provider of kind k, or of f.Default when k is empty.
func (f Factory) New(k Kind) (SandboxProvider, error) {
	if k == "" {
		k = f.Default
	}
	if k == "" {
		return nil, fmt.Errorf("DEFAULT_SANDBOX_PROVIDER is required when no provider type is supplied")
	}
	c, ok := f.Constructors[k]
	if !ok {
		return nil, fmt.Errorf("Unknown sandbox provider: %s", k)
	}
	return c()
}

// FileContent is one file read from a sandbox.
type FileContent struct {
	// Path is relative to the folder that was read.
	Path string `json:"path"`
	Data []byte `json:"data"`
}

// FileReader is implemented by providers that read a folder of a sandbox.
type FileReader interface {
	// ReadFiles returns every regular file under folder, recursively; a missing
	// folder is an empty result.
	ReadFiles(ctx context.Context, sandboxID, folder string) ([]FileContent, error)
}

// ServiceTestOptions are the options of TestServiceCommands.
type ServiceTestOptions struct {
	TimeoutMs int
	RunID     string
}

// ServiceTestResult is the outcome of one tested service command.
type ServiceTestResult struct {
	Name          string `json:"name"`
	WorkspacePath string `json:"workspacePath,omitempty"`
	Cwd           string `json:"cwd,omitempty"`
	Output        string `json:"output"`
	// ExitCode is nil when the command could not be run at all.
	ExitCode *int   `json:"exitCode"`
	LogFile  string `json:"logFile,omitempty"`
}

// ServiceTester is implemented by providers that can try service commands.
type ServiceTester interface {
	// TestServiceCommands runs each command to completion (or timeout) and reports
	// its capped output and exit code.
	TestServiceCommands(ctx context.Context, sandboxID string, cmds []ConfigurationServiceCommand, o ServiceTestOptions) ([]ServiceTestResult, error)
}
