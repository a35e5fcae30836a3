package coderun

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/proliferate-ai/sandbox-mcp/provider/docsearch"
	"github.com/proliferate-ai/sandbox-mcp/provider/engine"
	"github.com/proliferate-ai/sandbox-mcp/rules"
)

// Session is one model session: a sandbox (booted from the dependency snapshot when
// needed), its REPL, and a volume at /workspace that outlives the sandbox.
type Session struct {
	r  *Runner
	id string
	mu sync.Mutex // one run_code at a time
}

// RunResult is run_code's answer. Stdout, Result and Error together fit the output
// budget (Config.OutputBudgetKB); Truncated says what was cut and where the whole is.
type RunResult struct {
	Success bool `json:"success"`
	// Result is the JSON value of the last expression (absent for undefined, and when
	// it is over the budget: see Truncated.ResultPreview). Map, Set, typed arrays and
	// errors are {"$map": [[k, v]…]}, {"$set": […]}, {"$Uint8Array": […]} and
	// {"$error": "…"}; bigints, NaN and Infinity are strings.
	Result json.RawMessage `json:"result,omitempty"`
	// Error is the failure: a thrown error with the lines of the code it passed
	// through, a type error, a timeout.
	Error  string `json:"error,omitempty"`
	Stdout string `json:"stdout"`
	// Truncated is set when stdout or the result were cut to the budget.
	Truncated *Truncation `json:"truncated,omitempty"`
}

// Truncation says what of a RunResult was cut and where the whole is: files under
// /workspace/.coderun, and the REPL variables $stdout and $result.
type Truncation struct {
	// StdoutBytes is the size of the whole stdout, StdoutFile the file with it.
	StdoutBytes     int64  `json:"stdoutBytes,omitempty"`
	StdoutFile      string `json:"stdoutFile,omitempty"`
	StdoutFileError string `json:"stdoutFileError,omitempty"`
	// ResultBytes is the size of the result's JSON, ResultFile the file with it, and
	// ResultPreview its head and tail.
	ResultBytes     int64  `json:"resultBytes,omitempty"`
	ResultFile      string `json:"resultFile,omitempty"`
	ResultFileError string `json:"resultFileError,omitempty"`
	ResultPreview   string `json:"resultPreview,omitempty"`
}

// RunRequest is one run_code call.
type RunRequest struct {
	// Code is the TypeScript to run.
	Code string
	// Description says what the code does (logged).
	Description string
	// Reset restarts the session's REPL first: its variables are gone, its files stay.
	Reset bool
	// Typecheck, when set, overrides Config.Typecheck for this call.
	Typecheck *bool
	// Progress, when set, receives the stdout the code prints while it runs (up to
	// the budget).
	Progress func(chunk string)
}

// Session returns the session with this id (letters, digits and ._:@-, at most 128).
func (r *Runner) Session(id string) (*Session, error) {
	if !validSession.MatchString(id) {
		return nil, fmt.Errorf("session id %q: want 1-128 letters, digits or ._:@-", id)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	s, ok := r.sessions[id]
	if !ok {
		s = &Session{r: r, id: id}
		r.sessions[id] = s
	}
	return s, nil
}

// ID is the session's id.
func (s *Session) ID() string { return s.id }

// Volume is the name of the session's volume: the one it got with a spare sandbox,
// else a hash of its id.
func (s *Session) Volume() string {
	if st, err := s.state(); err == nil && st.Volume != "" {
		return st.Volume
	}
	return volumeName(s.id)
}

// state returns a copy of the session's saved state.
func (s *Session) state() (sessionState, error) {
	var st sessionState
	err := s.r.withState(func(m map[string]*sessionState) error {
		if p := m[s.id]; p != nil {
			st = *p
		}
		return nil
	})
	return st, err
}

// update changes the session's saved state.
func (s *Session) update(f func(st *sessionState)) error {
	return s.r.withState(func(m map[string]*sessionState) error {
		p := m[s.id]
		if p == nil {
			p = &sessionState{}
			m[s.id] = p
		}
		f(p)
		return nil
	})
}

// lock serializes the session's calls in this process and across processes on the
// same DataDir (two CLI calls of one session must not boot two sandboxes).
func (s *Session) lock() (func(), error) {
	s.mu.Lock()
	unlock, err := s.r.lockSession(s.id, true)
	if err != nil {
		s.mu.Unlock()
		return nil, err
	}
	return func() {
		unlock()
		s.mu.Unlock()
	}, nil
}

// Start boots the session's sandbox and REPL now (warm mode) instead of on the first
// RunCode.
func (s *Session) Start(ctx context.Context) error {
	unlock, err := s.lock()
	if err != nil {
		return err
	}
	defer unlock()
	_, err = s.ready(ctx)
	return err
}

// ready returns the session's live sandbox with a REPL, creating what is missing.
func (s *Session) ready(ctx context.Context) (sessionState, error) {
	// A call in progress is not idle.
	now := s.r.o.Now()
	if err := s.update(func(p *sessionState) { p.LastUsed = now }); err != nil {
		return sessionState{}, err
	}
	st, err := s.state()
	if err != nil {
		return st, err
	}
	if st.Sandbox != "" {
		info, err := s.r.eng.Get(ctx, st.Sandbox)
		if err != nil || info.State != engine.StateRunning {
			st.Sandbox, st.Pid = "", 0
		}
	}
	if st.Sandbox == "" {
		if claimed, ok := s.r.claimSpare(ctx, s); ok {
			return claimed, nil
		}
		if st.Sandbox, err = s.createSandbox(ctx); err != nil {
			return st, err
		}
		st.Pid, st.Volume = 0, s.Volume()
		if err := s.update(func(p *sessionState) { p.Sandbox, p.Pid, p.Volume = st.Sandbox, 0, st.Volume }); err != nil {
			return st, err
		}
	}
	if st.Pid == 0 {
		if st.Pid, err = s.r.startREPL(ctx, st.Sandbox, rules.CoderunWorkspace); err != nil {
			return st, err
		}
		if err := s.update(func(p *sessionState) { p.Pid = st.Pid }); err != nil {
			return st, err
		}
	}
	return st, nil
}

// createSandbox boots a sandbox from the dependency snapshot with the session's
// volume at /workspace, and records the mount in the volume registry.
func (s *Session) createSandbox(ctx context.Context) (string, error) {
	snap, err := s.r.EnsureSnapshot(ctx)
	if err != nil {
		return "", err
	}
	vol := s.Volume()
	spec, err := s.r.sandboxSpec(ctx, snap, vol, s.id)
	if err != nil {
		return "", err
	}
	// Registered before the sandbox boots: a volume whose sandbox fails to boot still
	// has a row, so Cleanup deletes it after the TTL.
	if err := s.r.store.TouchVolume(ctx, vol, s.id, s.r.o.Now()); err != nil {
		return "", err
	}
	info, err := s.r.eng.Create(ctx, spec)
	if errors.Is(err, engine.ErrNotFound) {
		// The engine lost the snapshot: forget it and build again.
		if ferr := s.r.forgetSnapshot(snap.Name); ferr != nil {
			return "", ferr
		}
		if snap, err = s.r.EnsureSnapshot(ctx); err != nil {
			return "", err
		}
		spec.Snapshot, spec.Image = bootFrom(snap)
		info, err = s.r.eng.Create(ctx, spec)
	}
	if err != nil {
		return "", fmt.Errorf("create session sandbox: %w", secretsHint(spec, err))
	}
	return info.ID, nil
}

// maxCode caps one snippet.
const maxCode = 1 << 20

// RunCode is Run of code alone.
func (s *Session) RunCode(ctx context.Context, code, description string) (RunResult, error) {
	return s.Run(ctx, RunRequest{Code: code, Description: description})
}

// Run evaluates TypeScript in the session's REPL. A compile error, a type error (with
// type-checking on), a thrown error, a timeout and running out of memory are a
// RunResult with Success false; the error return is for failures of the machinery
// (engine, snapshot build).
func (s *Session) Run(ctx context.Context, req RunRequest) (RunResult, error) {
	if len(req.Code) > maxCode {
		return RunResult{Error: fmt.Sprintf("code is %d bytes, over the limit of %d", len(req.Code), maxCode)}, nil
	}
	unlock, err := s.lock()
	if err != nil {
		return RunResult{}, err
	}
	defer unlock()
	if req.Reset {
		if err := s.resetREPL(ctx); err != nil {
			return RunResult{}, err
		}
	}
	st, err := s.ready(ctx)
	if err != nil {
		return RunResult{}, err
	}
	s.r.log.Debug("run code", "session", s.id, "description", req.Description, "bytes", len(req.Code))
	check := s.r.cfg.Typecheck
	if req.Typecheck != nil {
		check = *req.Typecheck
	}
	var res RunResult
	alive := true
	if check {
		res, err = s.r.typecheck(ctx, st, req.Code)
		if err != nil {
			return RunResult{}, err
		}
	}
	if res.Error == "" {
		out := rules.CoderunOutputDir + "/out-" + s.r.o.Now().UTC().Format("20060102-150405.000000")
		res, alive = s.r.evalStream(ctx, st, evalRequest{Code: req.Code, Budget: s.r.cfg.outputBudget(), Out: out}, req.Progress)
	}
	now := s.r.o.Now()
	err = s.update(func(p *sessionState) {
		p.LastUsed = now
		if !alive {
			p.Pid = 0
		}
	})
	if err != nil {
		return res, err
	}
	if terr := s.r.store.TouchVolume(ctx, s.Volume(), s.id, now); terr != nil {
		return res, terr
	}
	return res, nil
}

// resetREPL kills the session's REPL, if it runs; the next ready starts another.
func (s *Session) resetREPL(ctx context.Context) error {
	st, err := s.state()
	if err != nil || st.Sandbox == "" || st.Pid == 0 {
		return err
	}
	s.r.killREPL(ctx, st)
	return s.update(func(p *sessionState) { p.Pid = 0 })
}

// SearchDocs searches the packages' docs and, while its volume lives, the session's
// code modules.
func (s *Session) SearchDocs(ctx context.Context, query, pkg string, k int) (docsearch.Results, error) {
	vol := s.Volume()
	if ok, err := s.r.volumeAlive(ctx, vol); err != nil {
		return docsearch.Results{}, err
	} else if !ok {
		// A registry row of a dead volume goes now, with its modules.
		if err := s.r.store.DeleteVolume(ctx, vol); err != nil {
			return docsearch.Results{}, err
		}
		vol = ""
	} else if pkg == "" {
		if err := s.indexWorkspace(ctx, vol); err != nil {
			s.r.log.Warn("index the workspace's modules", "session", s.id, "err", err)
		}
	}
	return s.r.search(ctx, query, pkg, vol, k)
}

// SaveModules indexes modules the model saved under /workspace (no source is stored;
// the volume is the truth). Paths are relative to /workspace or absolute under it.
func (s *Session) SaveModules(ctx context.Context, mods []docsearch.Module) error {
	for i, m := range mods {
		p, err := modulePath(m.Path)
		if err != nil {
			return err
		}
		mods[i].Path = p
	}
	if ok, err := s.r.volumeAlive(ctx, s.Volume()); err != nil {
		return err
	} else if !ok {
		return fmt.Errorf("save modules: the session has no volume yet (run code first)")
	}
	var paths []string
	for _, m := range mods {
		paths = append(paths, m.Path)
	}
	missing, err := s.missingFiles(ctx, paths)
	if err != nil {
		return fmt.Errorf("save modules: %w", err)
	}
	if len(missing) > 0 {
		return fmt.Errorf("save modules: no such file under %s: %s (write the module first, then save it)",
			rules.CoderunWorkspace, strings.Join(missing, ", "))
	}
	return s.r.store.SaveModules(ctx, s.Volume(), mods)
}

// missingFiles are the paths (relative to /workspace) that are not regular files in
// the session's volume: looked up in the host directory, or in the session's sandbox
// (booted when it has none).
func (s *Session) missingFiles(ctx context.Context, paths []string) ([]string, error) {
	var missing []string
	if s.r.volumes() == nil {
		root := s.r.hostVolume(s.Volume())
		for _, p := range paths {
			// Lstat: a symlink in the volume must not make a host file count.
			if fi, err := os.Lstat(filepath.Join(root, filepath.FromSlash(p))); err != nil || !fi.Mode().IsRegular() {
				missing = append(missing, p)
			}
		}
		return missing, nil
	}
	unlock, err := s.lock()
	if err != nil {
		return nil, err
	}
	defer unlock()
	st, err := s.ready(ctx)
	if err != nil {
		return nil, err
	}
	var out bytes.Buffer
	argv := append([]string{"sh", "-c", `cd "$0" && for p; do [ -f "$p" ] || printf '%s\n' "$p"; done`, rules.CoderunWorkspace}, paths...)
	code, err := s.r.eng.Exec(ctx, st.Sandbox, engine.ExecRequest{Argv: argv, Timeout: 30 * time.Second, Stdout: &out})
	if err != nil {
		return nil, err
	}
	if code != 0 {
		return nil, fmt.Errorf("look for the modules: exit code %d", code)
	}
	for l := range strings.Lines(out.String()) {
		if l = strings.TrimSuffix(l, "\n"); l != "" {
			missing = append(missing, l)
		}
	}
	return missing, nil
}

// modulePath is a module's path relative to /workspace: absolute paths must be under
// it, and no path may leave it.
func modulePath(p string) (string, error) {
	rel := p
	if strings.HasPrefix(p, "/") {
		rel = strings.TrimPrefix(p, rules.CoderunWorkspace+"/")
		if rel == p {
			return "", fmt.Errorf("module path %q: want a path under %s", p, rules.CoderunWorkspace)
		}
	}
	clean := path.Clean(rel)
	if rel == "" || clean == "." || clean == ".." || strings.HasPrefix(clean, "../") || strings.HasPrefix(clean, "/") ||
		strings.ContainsAny(rel, "\x00") {
		return "", fmt.Errorf("module path %q: want a file under %s", p, rules.CoderunWorkspace)
	}
	return clean, nil
}

// Close destroys the session's sandbox; its volume stays until Cleanup.
func (s *Session) Close(ctx context.Context) error {
	unlock, err := s.lock()
	if err != nil {
		return err
	}
	defer unlock()
	return s.terminate(ctx)
}

// closeIfIdle is Close unless a call of the session is in progress (in any process):
// then it leaves the sandbox to that call, and to the reaper.
func (s *Session) closeIfIdle(ctx context.Context) error {
	if !s.mu.TryLock() {
		return nil
	}
	defer s.mu.Unlock()
	unlock, err := s.r.lockSession(s.id, false)
	if err != nil || unlock == nil {
		return err
	}
	defer unlock()
	return s.terminate(ctx)
}

// terminate destroys the sandbox; the caller holds the session's lock.
func (s *Session) terminate(ctx context.Context) error {
	st, err := s.state()
	if err != nil || st.Sandbox == "" {
		return err
	}
	// The state forgets the sandbox before the engine ends it: the state lock is not
	// held across the terminate, and no other call may dial a sandbox that is going.
	if err := s.update(func(p *sessionState) { p.Sandbox, p.Pid = "", 0 }); err != nil {
		return err
	}
	if err := s.r.eng.Terminate(ctx, st.Sandbox); err != nil {
		return errors.Join(fmt.Errorf("close session %s: %w", s.id, err),
			s.r.restoreVictim(reapVictim{id: s.id, st: st}))
	}
	return nil
}

// Sandbox is the id of the session's live sandbox, or "".
func (s *Session) Sandbox(ctx context.Context) (string, error) {
	st, err := s.state()
	if err != nil || st.Sandbox == "" {
		return "", err
	}
	if info, err := s.r.eng.Get(ctx, st.Sandbox); err != nil || info.State != engine.StateRunning {
		return "", nil
	}
	return st.Sandbox, nil
}
