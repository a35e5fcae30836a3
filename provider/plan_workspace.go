package provider

import (
	"path"
	"strings"
)

// workspace is the workspace setup: clone on a fresh boot, find the repo dir on a
// restore.
func (b *planBuilder) workspace() {
	ws := b.p.Workspace()
	if b.plan.Restore {
		b.plan.RepoDir = ws
		if m := b.cfg.Metadata; m != nil && m.RepoDir != "" {
			// The metadata comes from inside the sandbox: a repo dir outside the
			// workspace would make the boot write files elsewhere.
			if d := path.Clean(m.RepoDir); d == ws || strings.HasPrefix(d, ws+"/") {
				b.plan.RepoDir = d
			} else {
				b.warn("metadata repoDir %q is outside the workspace; using the workspace", m.RepoDir)
			}
		}
		if b.cfg.Kind == KindE2B {
			// A resumed E2B sandbox may still run the previous boot's processes.
			b.block(Step{Name: "kill stale processes", Kind: StepRun, Command: StaleProcessKillCommand,
				TimeoutMs: StaleKillTimeout.Milliseconds()})
		}
		if b.cfg.Kind != KindModal {
			// The old code also ran a jq loop that re-exported this profile in a shell of
			// its own, which had no effect; it is left out on purpose.
			b.block(Step{Name: "env profile", Kind: StepWrite, Path: b.p.EnvProfileFile(), Mode: 0o600,
				Content: compactJSON(b.env.EnvProfile()), Secret: true})
		}
		return
	}
	b.block(Step{Name: "workspace", Kind: StepMkdir, Path: ws, Mode: 0o755, Fatal: true})
	if len(b.opts.Repos) == 0 {
		b.plan.RepoDir = ws
		b.block(writeStep("metadata", b.p.MetadataFile(), 0o644,
			compactJSON(SessionMetadata{SessionID: b.opts.SessionID, RepoDir: ws, CreatedAt: b.now()})))
		return
	}
	if creds := BuildGitCredentialsMap(b.tokenRepos()); len(creds) > 0 {
		s := writeStep("git credentials", b.p.GitCredentialsFile(), 0o600, compactJSON(creds))
		s.Secret = true
		b.block(s)
	}
	for _, r := range b.opts.Repos {
		target := b.p.RepoDir(r.WorkspacePath)
		branch := r.Branch
		if branch == "" {
			branch = b.opts.Branch
		}
		if b.bundled(r) {
			b.block(Step{Name: "clone " + repoLabel(r), Kind: StepGitBundle, TimeoutMs: CloneTimeout.Milliseconds(),
				Fatal: true, Requires: "git", Git: b.bundleSpec(r, branch, target, false)})
			continue
		}
		url := AuthenticatedCloneURL(r.RepoURL, r.Token)
		s := Step{Name: "clone " + repoLabel(r), Kind: StepRun, Command: BuildCloneCommand(url, branch, target),
			TimeoutMs: CloneTimeout.Milliseconds(), Fatal: true, Requires: "git"}
		if branch != "" && !r.BranchRequired {
			// A missing branch falls back to the repo's default branch; decided on the
			// exit code, which the old E2B code never saw (its SDK threw first).
			fb := s
			fb.Name += " (default branch)"
			fb.Command = BuildCloneCommand(url, "", target)
			s.Fallback = &fb
		}
		b.block(s)
	}
	b.plan.RepoDir = ws
	if len(b.opts.Repos) == 1 {
		b.plan.RepoDir = b.p.RepoDir(b.opts.Repos[0].WorkspacePath)
	}
	// A fresh clone is a fetch, so it records lastGitFetchAt; the old code left it
	// unset, which made the first restore pull even within the cadence.
	now := b.now()
	b.block(writeStep("metadata", b.p.MetadataFile(), 0o644,
		prettyJSON(SessionMetadata{SessionID: b.opts.SessionID, RepoDir: b.plan.RepoDir, CreatedAt: now, LastGitFetchAt: &now})))
}

// bundled reports whether r reaches the sandbox as a host-made bundle: in
// bundle mode, every http(s) repo with a token (the only kind a token is
// used for).
func (b *planBuilder) bundled(r RepoSpec) bool {
	u := strings.ToLower(strings.TrimSpace(r.RepoURL))
	return b.cfg.GitMode == GitModeBundle && r.Token != "" && (strings.HasPrefix(u, "https://") || strings.HasPrefix(u, "http://"))
}

// tokenRepos are the repos whose token goes into the sandbox: none in bundle mode.
func (b *planBuilder) tokenRepos() []RepoSpec {
	if b.cfg.GitMode == GitModeBundle {
		return nil
	}
	return b.opts.Repos
}

func (b *planBuilder) bundleSpec(r RepoSpec, branch, target string, pull bool) *GitBundleSpec {
	name, label := "boot", repoLabel(r)
	if pull {
		name = "pull"
	}
	if label == "." {
		label = "workspace"
	}
	return &GitBundleSpec{RepoURL: r.RepoURL, Token: r.Token, Branch: branch, Target: target, Pull: pull,
		BundlePath: path.Join(b.p.Tmp, "git-"+name+"-"+strings.ReplaceAll(label, "/", "_")+".bundle")}
}

// validWorkspacePath reports whether a repo's workspacePath stays inside the
// workspace: "" or ".", or a relative path without ".." segments.
func validWorkspacePath(wp string) bool {
	return wp == "" || wp == "." || IsValidTargetPath(wp)
}

func repoLabel(r RepoSpec) string {
	if r.WorkspacePath == "" || r.WorkspacePath == "." {
		return "."
	}
	return r.WorkspacePath
}
