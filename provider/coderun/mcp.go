package coderun

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/proliferate-ai/sandbox-mcp/provider/docsearch"
)

// RunCodeInput is the input of run_code.
type RunCodeInput struct {
	Code        string `json:"code" jsonschema:"TypeScript to run; the value of the last expression (awaited) is returned as JSON"`
	Description string `json:"description,omitempty" jsonschema:"one line on what the code does"`
	Session     string `json:"session,omitempty" jsonschema:"session id (default: this MCP session)"`
	Reset       bool   `json:"reset,omitempty" jsonschema:"restart the session's REPL before running: its variables are gone, files under /workspace stay"`
	Typecheck   *bool  `json:"typecheck,omitempty" jsonschema:"type-check the code (deno check) before running it; default: the sandbox's typecheck setting"`
}

// runCodeOutputSchema is RunResult's schema, its result any JSON value.
func runCodeOutputSchema() (*jsonschema.Schema, error) {
	s, err := jsonschema.For[RunResult](nil)
	if err != nil {
		return nil, err
	}
	s.Properties["result"] = &jsonschema.Schema{Description: "the JSON value of the last expression; absent for undefined and when over the output budget (see truncated)"}
	s.Properties["stdout"].Description = "console output, cut to the output budget"
	s.Properties["error"].Description = "why it failed, with the lines of the code"
	return s, nil
}

// SearchDocsInput is the input of search_docs.
type SearchDocsInput struct {
	Query   string `json:"query" jsonschema:"what to look for"`
	Package string `json:"package,omitempty" jsonschema:"search only this package's docs"`
	K       int    `json:"k,omitempty" jsonschema:"how many results (default 5, at most 20)"`
	Outline bool   `json:"outline,omitempty" jsonschema:"titles and first lines only: to see what there is, then search one package"`
	Session string `json:"session,omitempty" jsonschema:"session id (default: this MCP session)"`
}

// searchDocsSchema is SearchDocsInput's schema with the configured packages as the
// enum of package.
func searchDocsSchema(pkgs []string) (*jsonschema.Schema, error) {
	s, err := jsonschema.For[SearchDocsInput](nil)
	if err != nil {
		return nil, err
	}
	if len(pkgs) > 0 {
		p := s.Properties["package"]
		for _, name := range pkgs {
			p.Enum = append(p.Enum, name)
		}
	}
	return s, nil
}

// SaveModulesInput is the input of save_code_modules.
type SaveModulesInput struct {
	Modules moduleList `json:"modules"`
	Session string     `json:"session,omitempty" jsonschema:"session id (default: this MCP session)"`
}

// moduleList is save_code_modules' list, also accepted as a JSON string (clients
// that pass every argument as a string, like the MCP Inspector's CLI).
type moduleList []docsearch.Module

// UnmarshalJSON accepts the list or a string holding it.
func (m *moduleList) UnmarshalJSON(b []byte) error {
	if len(b) > 0 && b[0] == '"' {
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		b = []byte(s)
	}
	return json.Unmarshal(b, (*[]docsearch.Module)(m))
}

// saveModulesSchema is SaveModulesInput's schema with modules as a list or a string.
func saveModulesSchema() (*jsonschema.Schema, error) {
	s, err := jsonschema.For[SaveModulesInput](nil)
	if err != nil {
		return nil, err
	}
	list := s.Properties["modules"]
	list.Description = "modules saved under /workspace: [{path, description, exports, usage}]"
	s.Properties["modules"] = &jsonschema.Schema{AnyOf: []*jsonschema.Schema{list,
		{Type: "string", Description: "the same list as a JSON string"}}}
	return s, nil
}

// mcpTools serves one MCP connection.
type mcpTools struct {
	r *Runner
	// defaultSession is the session of calls without a session argument: the MCP
	// session's id, or one generated for this connection (stdio has none).
	defaultSession string

	mu sync.Mutex
	// used are the sessions the connection used: its own (closed when the
	// connection ends) and those named by a session argument, true for its own. A
	// named session may be shared: it is closed at the end unless a call of it is in
	// progress elsewhere.
	used map[string]bool
	wg   sync.WaitGroup
}

// ServeMCP serves run_code, search_docs and save_code_modules over one MCP
// connection until it ends, then closes the sandboxes of the sessions it used (their
// volumes stay; a named session busy elsewhere is left to its caller). In warm mode
// the connection's own session boots as the connection starts.
func (r *Runner) ServeMCP(ctx context.Context, in io.ReadCloser, out io.WriteCloser, version string) error {
	var b [6]byte
	_, _ = rand.Read(b[:])
	t := &mcpTools{r: r, defaultSession: "mcp-" + hex.EncodeToString(b[:]), used: map[string]bool{}}
	s := mcp.NewServer(&mcp.Implementation{Name: "sandboxctl-code", Version: version}, &mcp.ServerOptions{
		Instructions: r.PromptAddendum(),
		Logger:       r.o.Logger.With("component", "coderun_mcp"),
	})
	outSchema, err := runCodeOutputSchema()
	if err != nil {
		return err
	}
	mcp.AddTool(s, &mcp.Tool{Name: "run_code", OutputSchema: outSchema, Description: "Run TypeScript (Deno) in this session's sandbox, like a REPL: " +
		"variables persist between calls, the last expression's value is returned as JSON (promises are awaited), console output is in stdout. " +
		"Packages import by name, from the code and from modules under /workspace. Files under /workspace persist for the session. " +
		"Errors name the line of your code. Output over the budget comes back as a head and a tail: the whole is in $stdout and $result " +
		"and in the files named in truncated. reset: true starts a fresh REPL. Returns {success, result?, error?, stdout, truncated?}."}, t.runCode)
	searchSchema, err := searchDocsSchema(r.packages())
	if err != nil {
		return err
	}
	mcp.AddTool(s, &mcp.Tool{Name: "search_docs", InputSchema: searchSchema, Description: "Search the documentation of the available packages, and the code modules saved in this session. " +
		"Call it before writing code that uses a package. Returns results best first: {package, title, content, score, source}."}, t.searchDocs)
	schema, err := saveModulesSchema()
	if err != nil {
		return err
	}
	mcp.AddTool(s, &mcp.Tool{Name: "save_code_modules", InputSchema: schema, Description: "Declare reusable modules you saved under /workspace " +
		"(path, description, exports, usage) so search_docs finds them later in this session. The source stays in /workspace."}, t.saveModules)
	r.refillSpares()
	// Docs are indexed behind the connection: initialize never waits on a docs URL.
	r.IndexDocsInBackground()
	if r.cfg.Mode == "warm" {
		// One stdio connection is one session: warm mode boots it now.
		t.warm(ctx, nil)
	}
	err = s.Run(ctx, &mcp.IOTransport{Reader: in, Writer: out})
	t.wg.Wait()
	t.closeAll()
	if errors.Is(err, context.Canceled) || errors.Is(err, io.EOF) {
		return nil
	}
	return err
}

// session is the id of a call's session.
func (t *mcpTools) session(ss *mcp.ServerSession) string {
	if ss != nil && ss.ID() != "" {
		return ss.ID()
	}
	return t.defaultSession
}

func (t *mcpTools) open(id string, ss *mcp.ServerSession) (*Session, error) {
	own := id == ""
	if own {
		id = t.session(ss)
	}
	s, err := t.r.Session(id)
	if err != nil {
		return nil, err
	}
	t.mu.Lock()
	t.used[id] = t.used[id] || own
	t.mu.Unlock()
	return s, nil
}

// warm boots a session in the background; ServeMCP waits for it before it returns.
func (t *mcpTools) warm(ctx context.Context, ss *mcp.ServerSession) {
	s, err := t.open("", ss)
	if err != nil {
		return
	}
	t.wg.Add(1)
	go func() {
		defer t.wg.Done()
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Minute)
		defer cancel()
		if err := s.Start(ctx); err != nil {
			t.r.log.Warn("warm session", "session", s.ID(), "err", err)
		}
	}()
}

func (t *mcpTools) closeAll() {
	t.mu.Lock()
	defer t.mu.Unlock()
	for id, own := range t.used {
		s, err := t.r.Session(id)
		if err != nil {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		if own {
			err = s.Close(ctx)
		} else {
			err = s.closeIfIdle(ctx)
		}
		if err != nil {
			t.r.log.Warn("close session", "session", id, "err", err)
		}
		cancel()
	}
}

func jsonResult(v any) *mcp.CallToolResult {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		b = []byte(fmt.Sprint(v))
	}
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: string(b)}}}
}

// runCode answers with the RunResult as structured content (and as its compact JSON
// text), isError when the code failed; the stdout the code prints while it runs goes
// out as progress notifications when the call asked for progress.
func (t *mcpTools) runCode(ctx context.Context, req *mcp.CallToolRequest, in RunCodeInput) (*mcp.CallToolResult, RunResult, error) {
	s, err := t.open(in.Session, req.Session)
	if err != nil {
		return nil, RunResult{}, err
	}
	rr := RunRequest{Code: in.Code, Description: in.Description, Reset: in.Reset, Typecheck: in.Typecheck}
	if tok := req.Params.GetProgressToken(); tok != nil && req.Session != nil {
		n := 0
		rr.Progress = func(chunk string) {
			n++
			err := req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: tok, Progress: float64(n), Message: chunk})
			if err != nil {
				t.r.log.Debug("progress notification", "err", err)
			}
		}
	}
	res, err := s.Run(ctx, rr)
	if err != nil {
		return nil, RunResult{}, err
	}
	return &mcp.CallToolResult{IsError: !res.Success}, res, nil
}

func (t *mcpTools) searchDocs(ctx context.Context, req *mcp.CallToolRequest, in SearchDocsInput) (*mcp.CallToolResult, any, error) {
	s, err := t.open(in.Session, req.Session)
	if err != nil {
		return nil, nil, err
	}
	res, err := s.SearchDocs(ctx, in.Query, in.Package, min(max(in.K, 0), 20))
	if err != nil {
		return nil, nil, err
	}
	if in.Outline {
		res = res.Outline()
	}
	b, err := json.Marshal(res.Fit(t.r.searchBudget()))
	if err != nil {
		return nil, nil, err
	}
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: string(b)}}}, nil, nil
}

func (t *mcpTools) saveModules(ctx context.Context, req *mcp.CallToolRequest, in SaveModulesInput) (*mcp.CallToolResult, any, error) {
	s, err := t.open(in.Session, req.Session)
	if err != nil {
		return nil, nil, err
	}
	if err := s.SaveModules(ctx, in.Modules); err != nil {
		return nil, nil, err
	}
	return jsonResult(map[string]int{"saved": len(in.Modules)}), nil, nil
}
