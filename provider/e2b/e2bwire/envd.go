package e2bwire

// The envd messages of the process and filesystem services in the protobuf JSON
// mapping (lowerCamelCase names, bytes as base64, enums as their names, 64-bit
// integers as strings). Only the fields this package uses are declared.

import (
	"encoding/json"
	"strconv"
	"time"
)

// EnvdPort is envd's port inside every E2B sandbox.
const EnvdPort = 49983

// Envd RPC paths.
const (
	PathProcessStart      = "/process.Process/Start"
	PathProcessConnect    = "/process.Process/Connect"
	PathProcessList       = "/process.Process/List"
	PathProcessSendInput  = "/process.Process/SendInput"
	PathProcessSendSignal = "/process.Process/SendSignal"
	PathProcessCloseStdin = "/process.Process/CloseStdin"
	PathProcessUpdate     = "/process.Process/Update"
	PathFilesystemStat    = "/filesystem.Filesystem/Stat"
	PathFilesystemListDir = "/filesystem.Filesystem/ListDir"
	PathFilesystemMakeDir = "/filesystem.Filesystem/MakeDir"
	PathFilesystemRemove  = "/filesystem.Filesystem/Remove"
	PathFilesystemMove    = "/filesystem.Filesystem/Move"
	PathFilesystemWatch   = "/filesystem.Filesystem/WatchDir"
)

// ProcessConfig is what to run.
type ProcessConfig struct {
	Cmd  string            `json:"cmd"`
	Args []string          `json:"args,omitempty"`
	Envs map[string]string `json:"envs,omitempty"`
	Cwd  *string           `json:"cwd,omitempty"`
}

// StartRequest is process.Start's request.
type StartRequest struct {
	Process ProcessConfig `json:"process"`
	Tag     *string       `json:"tag,omitempty"`
	Stdin   *bool         `json:"stdin,omitempty"`
	PTY     *PTY          `json:"pty,omitempty"`
}

// PTY asks for a pseudo-terminal of Size.
type PTY struct {
	Size PTYSize `json:"size"`
}

// PTYSize is a terminal's size.
type PTYSize struct {
	Cols uint32 `json:"cols"`
	Rows uint32 `json:"rows"`
}

// UpdateRequest is process.Update's request: a new terminal size.
type UpdateRequest struct {
	Process ProcessSelector `json:"process"`
	PTY     *PTY            `json:"pty,omitempty"`
}

// ProcessSelector picks a process by pid or tag.
type ProcessSelector struct {
	PID *uint32 `json:"pid,omitempty"`
	Tag *string `json:"tag,omitempty"`
}

// ConnectRequest is process.Connect's request.
type ConnectRequest struct {
	Process ProcessSelector `json:"process"`
}

// ProcessInput is stdin data.
type ProcessInput struct {
	Stdin []byte `json:"stdin,omitempty"`
	PTY   []byte `json:"pty,omitempty"`
}

// SendInputRequest is process.SendInput's request.
type SendInputRequest struct {
	Process ProcessSelector `json:"process"`
	Input   ProcessInput    `json:"input"`
}

// Signals.
const (
	SignalSIGTERM = "SIGNAL_SIGTERM"
	SignalSIGKILL = "SIGNAL_SIGKILL"
)

// Signal is a process.Signal; JSON may carry the name or the number.
type Signal string

// UnmarshalJSON accepts "SIGNAL_SIGKILL" or 9.
func (s *Signal) UnmarshalJSON(b []byte) error {
	var name string
	if json.Unmarshal(b, &name) == nil {
		*s = Signal(name)
		return nil
	}
	var n int
	if err := json.Unmarshal(b, &n); err != nil {
		return err
	}
	switch n {
	case 9:
		*s = SignalSIGKILL
	case 15:
		*s = SignalSIGTERM
	default:
		*s = Signal("SIGNAL_" + strconv.Itoa(n))
	}
	return nil
}

// SendSignalRequest is process.SendSignal's request.
type SendSignalRequest struct {
	Process ProcessSelector `json:"process"`
	Signal  Signal          `json:"signal"`
}

// CloseStdinRequest is process.CloseStdin's request.
type CloseStdinRequest struct {
	Process ProcessSelector `json:"process"`
}

// ProcessInfo is one entry of process.List.
type ProcessInfo struct {
	Config ProcessConfig `json:"config"`
	PID    uint32        `json:"pid"`
	Tag    *string       `json:"tag,omitempty"`
}

// ListResponse is process.List's response.
type ListResponse struct {
	Processes []ProcessInfo `json:"processes"`
}

// StartEvent says the process started.
type StartEvent struct {
	PID uint32 `json:"pid"`
}

// DataEvent is a chunk of output.
type DataEvent struct {
	Stdout []byte `json:"stdout,omitempty"`
	Stderr []byte `json:"stderr,omitempty"`
	PTY    []byte `json:"pty,omitempty"`
}

// EndEvent says the process ended.
type EndEvent struct {
	ExitCode int32   `json:"exitCode,omitempty"`
	Exited   bool    `json:"exited,omitempty"`
	Status   string  `json:"status,omitempty"`
	Error    *string `json:"error,omitempty"`
}

// ProcessEvent is one event of a process stream; exactly one field is set.
type ProcessEvent struct {
	Start     *StartEvent `json:"start,omitempty"`
	Data      *DataEvent  `json:"data,omitempty"`
	End       *EndEvent   `json:"end,omitempty"`
	Keepalive *struct{}   `json:"keepalive,omitempty"`
}

// StreamResponse is a StartResponse or ConnectResponse.
type StreamResponse struct {
	Event ProcessEvent `json:"event"`
}

// File types.
const (
	FileTypeFile      = "FILE_TYPE_FILE"
	FileTypeDirectory = "FILE_TYPE_DIRECTORY"
	FileTypeSymlink   = "FILE_TYPE_SYMLINK"
)

// EntryInfo describes a file.
type EntryInfo struct {
	Name         string     `json:"name"`
	Type         string     `json:"type"`
	Path         string     `json:"path"`
	Size         Int64      `json:"size,omitempty"`
	Mode         uint32     `json:"mode,omitempty"`
	Permissions  string     `json:"permissions,omitempty"`
	Owner        string     `json:"owner,omitempty"`
	Group        string     `json:"group,omitempty"`
	ModifiedTime *time.Time `json:"modifiedTime,omitempty"`
}

// IsDir reports whether the entry is a directory.
func (e EntryInfo) IsDir() bool { return e.Type == FileTypeDirectory }

// Int64 is a protobuf int64: a string in JSON, a number accepted too.
type Int64 int64

// MarshalJSON encodes the number as a string.
func (n Int64) MarshalJSON() ([]byte, error) {
	return json.Marshal(strconv.FormatInt(int64(n), 10))
}

// UnmarshalJSON accepts "12" or 12.
func (n *Int64) UnmarshalJSON(b []byte) error {
	var s string
	if json.Unmarshal(b, &s) == nil {
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return err
		}
		*n = Int64(v)
		return nil
	}
	var v int64
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	*n = Int64(v)
	return nil
}

// PathRequest is the request of Stat, MakeDir and Remove.
type PathRequest struct {
	Path string `json:"path"`
}

// ListDirRequest is filesystem.ListDir's request.
type ListDirRequest struct {
	Path  string `json:"path"`
	Depth uint32 `json:"depth,omitempty"`
}

// MoveRequest is filesystem.Move's request.
type MoveRequest struct {
	Source      string `json:"source"`
	Destination string `json:"destination"`
}

// EntryResponse is the response of Stat, MakeDir and Move.
type EntryResponse struct {
	Entry *EntryInfo `json:"entry,omitempty"`
}

// ListDirResponse is filesystem.ListDir's response.
type ListDirResponse struct {
	Entries []EntryInfo `json:"entries"`
}

// FileEntry is one entry of the /files upload response.
type FileEntry struct {
	Path string `json:"path"`
	Name string `json:"name"`
	Type string `json:"type"`
}

// WatchDirRequest is filesystem.WatchDir's request.
type WatchDirRequest struct {
	Path      string `json:"path"`
	Recursive bool   `json:"recursive,omitempty"`
}

// Filesystem event types.
const (
	EventCreate = "EVENT_TYPE_CREATE"
	EventWrite  = "EVENT_TYPE_WRITE"
	EventRemove = "EVENT_TYPE_REMOVE"
	EventRename = "EVENT_TYPE_RENAME"
	EventChmod  = "EVENT_TYPE_CHMOD"
)

// FilesystemEvent is one change under a watched directory; Name is relative to it.
type FilesystemEvent struct {
	Name string `json:"name"`
	Type string `json:"type"`
}

// WatchDirResponse is one message of a WatchDir stream; exactly one field is set.
type WatchDirResponse struct {
	Start      *struct{}        `json:"start,omitempty"`
	Filesystem *FilesystemEvent `json:"filesystem,omitempty"`
	Keepalive  *struct{}        `json:"keepalive,omitempty"`
}
