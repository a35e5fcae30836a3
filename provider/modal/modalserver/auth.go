package modalserver

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"errors"
	"fmt"
	"github.com/proliferate-ai/sandbox-mcp/provider"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/proliferate-ai/sandbox-mcp/rules/atomicfile"
)

// TokenFile is the name, in a state dir, of the file LoadOrCreateToken keeps the
// server's token pair in (mode 0600).
const TokenFile = "modal-token"

// Token is the one token pair a Server accepts: MODAL_TOKEN_ID and MODAL_TOKEN_SECRET.
type Token struct {
	ID, Secret string
}

// NewToken returns a random pair with Modal's shapes (ak-…, as-…).
func NewToken() Token {
	return Token{ID: "ak-" + rand.Text(), Secret: "as-" + rand.Text()}
}

func (t Token) valid() bool {
	return strings.HasPrefix(t.ID, "ak-") && len(t.ID) > 3 && strings.HasPrefix(t.Secret, "as-") && len(t.Secret) > 3
}

// LoadOrCreateToken returns the pair kept in dir/TokenFile, or makes a new one and
// keeps it there (0600, written atomically), so clients keep working across restarts
// of the server. A file that is not a well-shaped pair, or that others may read, is an
// error rather than silently replaced.
func LoadOrCreateToken(dir string) (Token, error) {
	path := filepath.Join(dir, TokenFile)
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		tok := NewToken()
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return Token{}, err
		}
		body := provider.EnvModalTokenID + "=" + tok.ID + "\n" + provider.EnvModalTokenSecret + "=" + tok.Secret + "\n"
		if err := atomicfile.WriteFile(path, []byte(body), 0o600); err != nil {
			return Token{}, fmt.Errorf("write %s: %w", path, err)
		}
		return tok, nil
	}
	if err != nil {
		return Token{}, err
	}
	if st, err := os.Stat(path); err != nil {
		return Token{}, err
	} else if st.Mode().Perm()&0o077 != 0 {
		return Token{}, fmt.Errorf("%s is readable by others (mode %v): make it 0600", path, st.Mode().Perm())
	}
	var tok Token
	for _, line := range strings.Split(string(data), "\n") {
		k, v, _ := strings.Cut(strings.TrimSpace(line), "=")
		switch k {
		case provider.EnvModalTokenID:
			tok.ID = v
		case provider.EnvModalTokenSecret:
			tok.Secret = v
		}
	}
	if !tok.valid() {
		return Token{}, fmt.Errorf("%s holds no MODAL_TOKEN_ID=ak-… and MODAL_TOKEN_SECRET=as-… pair", path)
	}
	return tok, nil
}

const routerPrefix = "/modal.task_command_router.TaskCommandRouter/"

// subjectKey carries the verified command router token's subject (a task id).
type subjectKey struct{}

// authenticate checks a call's credentials and returns the context the handler runs
// with: control-plane calls need the server's token pair, command router calls a
// token the server signed (its subject, the task, goes into the context).
func (s *Server) authenticate(ctx context.Context, method string) (context.Context, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	first := func(k string) string {
		if v := md.Get(k); len(v) > 0 {
			return v[0]
		}
		return ""
	}
	if strings.HasPrefix(method, routerPrefix) {
		tok, ok := strings.CutPrefix(first("authorization"), "Bearer ")
		if !ok {
			return nil, status.Error(codes.Unauthenticated, "missing command router token")
		}
		sub, err := s.tokens.check(tok)
		if err != nil {
			return nil, status.Error(codes.Unauthenticated, "command router token: "+err.Error())
		}
		return context.WithValue(ctx, subjectKey{}, sub), nil
	}
	id, secret := first("x-modal-token-id"), first("x-modal-token-secret")
	if id == "" || secret == "" {
		return nil, status.Error(codes.Unauthenticated, "Token missing. Set MODAL_TOKEN_ID and MODAL_TOKEN_SECRET to the pair the local Modal server printed (`sandboxctl serve --protocol modal`)")
	}
	// Both compared, always, so the time taken says nothing about which half differs.
	okID := subtle.ConstantTimeCompare([]byte(id), []byte(s.o.Token.ID))
	okSecret := subtle.ConstantTimeCompare([]byte(secret), []byte(s.o.Token.Secret))
	if okID&okSecret != 1 {
		return nil, status.Error(codes.Unauthenticated, "Invalid token: the local Modal server accepts only the MODAL_TOKEN_ID/MODAL_TOKEN_SECRET pair it printed at start")
	}
	return ctx, nil
}

// taskAllowed refuses a command router call for a task other than the one its token
// was issued for.
func taskAllowed(ctx context.Context, taskID string) error {
	sub, _ := ctx.Value(subjectKey{}).(string)
	if sub == "" || subtle.ConstantTimeCompare([]byte(sub), []byte(taskID)) != 1 {
		return status.Errorf(codes.PermissionDenied, "command router token is not for task '%s'", taskID)
	}
	return nil
}

// taskRequest is every unary command router request.
type taskRequest interface{ GetTaskId() string }

func (s *Server) unaryAuth(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	ctx, err := s.authenticate(ctx, info.FullMethod)
	if err != nil {
		return nil, err
	}
	markAuthed(ctx)
	if strings.HasPrefix(info.FullMethod, routerPrefix) {
		// Checked here for every unary router call, whatever its handler does; a
		// request without a task is refused rather than let through.
		tr, ok := req.(taskRequest)
		if !ok {
			return nil, status.Errorf(codes.PermissionDenied, "%s names no task", info.FullMethod)
		}
		if err := taskAllowed(ctx, tr.GetTaskId()); err != nil {
			return nil, err
		}
	}
	resp, err := handler(ctx, req)
	if err != nil {
		s.log.Debug("modal call failed", "method", info.FullMethod, "err", err)
	}
	return resp, notServed(info.FullMethod, err)
}

// notServed gives the calls this server does not implement a message that says so
// (the generated default says only "method X not implemented").
func notServed(method string, err error) error {
	if st, ok := status.FromError(err); ok && st.Code() == codes.Unimplemented && strings.HasPrefix(st.Message(), "method ") {
		name := method[strings.LastIndex(method, "/")+1:]
		return status.Errorf(codes.Unimplemented, "local Modal server: %s is not served (it serves sandboxes, images, volumes and secrets as env; see docs/modal.md)", name)
	}
	return err
}

// authedStream is a stream whose context carries the verified token subject.
type authedStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (a authedStream) Context() context.Context { return a.ctx }

func (s *Server) streamAuth(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	ctx, err := s.authenticate(ss.Context(), info.FullMethod)
	if err != nil {
		return err
	}
	markAuthed(ctx)
	// Streaming router handlers check the task with taskAllowed once they have read it.
	return notServed(info.FullMethod, handler(srv, authedStream{ss, ctx}))
}
