package modalserver

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	modal "github.com/modal-labs/modal-client/go"
	pb "github.com/modal-labs/modal-client/go/proto/modal_proto"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/proliferate-ai/sandbox-mcp/provider/local"
	"github.com/proliferate-ai/sandbox-mcp/provider/modal/internal/modaltest"
)

// TestTokenPair: only the server's pair gets in; a wrong pair (a random well-shaped
// one, or one half right), a malformed one and a missing one (raw gRPC: the SDK
// refuses to start without) are Unauthenticated before anything runs.
func TestTokenPair(t *testing.T) {
	eng := modaltest.Engine(t, local.EngineOptions{})
	url, _ := startServer(t, eng)
	for _, tc := range []struct {
		name, id, secret, want string
	}{
		{"random pair", NewToken().ID, NewToken().Secret, "Invalid token"},
		{"right id, wrong secret", testToken.ID, "as-wrong", "Invalid token"},
		{"wrong id, right secret", "ak-wrong", testToken.Secret, "Invalid token"},
		{"malformed", "not-a-token", "as-x", "Invalid token"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sdkEnv(t, url, true)
			t.Setenv("MODAL_TOKEN_ID", tc.id)
			t.Setenv("MODAL_TOKEN_SECRET", tc.secret)
			c, err := modal.NewClientWithOptions(nil)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			_, err = c.Apps.FromName(t.Context(), "x", &modal.AppFromNameParams{CreateIfMissing: true})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Apps.FromName with %s = %v, want an error with %q", tc.name, err, tc.want)
			}
		})
	}
	// Raw gRPC, so the missing pair reaches the server whatever the SDK does.
	conn, err := grpc.NewClient(strings.TrimPrefix(url, "http://"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_, err = pb.NewModalClientClient(conn).AppGetOrCreate(t.Context(), pb.AppGetOrCreateRequest_builder{AppName: "x"}.Build())
	if status.Code(err) != codes.Unauthenticated || !strings.Contains(err.Error(), "Token missing") {
		t.Errorf("AppGetOrCreate without a token pair = %v, want Unauthenticated: Token missing", err)
	}
}

// TestRouterTokenIsPerTask: a command router token issued for one sandbox's task is
// refused for another's, on unary and streaming calls alike. The sandboxes boot from
// an image the server builds (bootEngine), and the raw client creates them without
// joining the build: the create waits for it.
func TestRouterTokenIsPerTask(t *testing.T) {
	eng := bootEngine(t)
	url, _ := startServer(t, eng)
	conn, err := grpc.NewClient(strings.TrimPrefix(url, "http://"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx := metadata.AppendToOutgoingContext(t.Context(), "x-modal-token-id", testToken.ID, "x-modal-token-secret", testToken.Secret)
	cp := pb.NewModalClientClient(conn)
	app, err := cp.AppGetOrCreate(ctx, pb.AppGetOrCreateRequest_builder{AppName: "tasks",
		ObjectCreationType: pb.ObjectCreationType_OBJECT_CREATION_TYPE_CREATE_IF_MISSING}.Build())
	if err != nil {
		t.Fatal(err)
	}
	img, err := cp.ImageGetOrCreate(ctx, pb.ImageGetOrCreateRequest_builder{AppId: app.GetAppId(),
		Image: pb.Image_builder{DockerfileCommands: []string{"FROM debian:bookworm-slim"}}.Build()}.Build())
	if err != nil {
		t.Fatal(err)
	}
	var tasks [2]*pb.SandboxCreateV2Response
	for i := range tasks {
		tasks[i], err = cp.SandboxCreateV2(ctx, pb.SandboxCreateV2Request_builder{AppId: app.GetAppId(),
			Definition: pb.Sandbox_builder{ImageId: img.GetImageId()}.Build()}.Build())
		if err != nil {
			t.Fatal(err)
		}
	}
	router := pb.NewTaskCommandRouterClient(conn)
	asA := metadata.AppendToOutgoingContext(t.Context(), "authorization", "Bearer "+tasks[0].GetCommandRouterAccess().GetJwt())
	start := func(task string) error {
		_, err := router.TaskExecStart(asA, pb.TaskExecStartRequest_builder{TaskId: task, ExecId: "e-" + task,
			CommandArgs: []string{"true"}}.Build())
		return err
	}
	if err := start(tasks[0].GetTaskId()); err != nil {
		t.Fatalf("exec in its own task: %v", err)
	}
	if err := start(tasks[1].GetTaskId()); status.Code(err) != codes.PermissionDenied {
		t.Errorf("exec in another task with A's token = %v, want PermissionDenied", err)
	}
	st, err := router.TaskExecStdioRead(asA, pb.TaskExecStdioReadRequest_builder{TaskId: tasks[1].GetTaskId(), ExecId: "x",
		FileDescriptor: pb.TaskExecStdioFileDescriptor_TASK_EXEC_STDIO_FILE_DESCRIPTOR_STDOUT}.Build())
	if err == nil {
		_, err = st.Recv()
	}
	if status.Code(err) != codes.PermissionDenied {
		t.Errorf("stdio read in another task with A's token = %v, want PermissionDenied", err)
	}
	ws, err := router.TaskExecStdinWriteStream(asA)
	if err == nil {
		ws.Send(pb.TaskExecStdinWriteStreamRequest_builder{Start: pb.TaskExecStdinWriteStreamStart_builder{
			TaskId: tasks[1].GetTaskId(), ExecId: "x"}.Build()}.Build())
		_, err = ws.CloseAndRecv()
	}
	if status.Code(err) != codes.PermissionDenied {
		t.Errorf("stdin stream to another task with A's token = %v, want PermissionDenied", err)
	}
	forged := metadata.AppendToOutgoingContext(t.Context(), "authorization", "Bearer "+NewToken().Secret)
	if _, err := router.TaskExecStart(forged, pb.TaskExecStartRequest_builder{TaskId: tasks[0].GetTaskId(), ExecId: "f",
		CommandArgs: []string{"true"}}.Build()); status.Code(err) != codes.Unauthenticated {
		t.Errorf("exec with a forged router token = %v, want Unauthenticated", err)
	}
	for _, tk := range tasks {
		if _, err := cp.SandboxTerminateV2(ctx, pb.SandboxTerminateRequest_builder{SandboxId: tk.GetSandboxId()}.Build()); err != nil {
			t.Error(err)
		}
	}
}

// TestLoadOrCreateToken: a pair is made once, kept 0600 and read back; a file others
// can read, or one without a pair, is an error.
func TestLoadOrCreateToken(t *testing.T) {
	dir := t.TempDir()
	tok, err := LoadOrCreateToken(dir)
	if err != nil || !tok.valid() {
		t.Fatalf("LoadOrCreateToken = %+v, %v", tok, err)
	}
	st, err := os.Stat(filepath.Join(dir, TokenFile))
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("token file mode = %v, %v; want 0600", st.Mode().Perm(), err)
	}
	if again, err := LoadOrCreateToken(dir); err != nil || again != tok {
		t.Errorf("second LoadOrCreateToken = %+v, %v; want %+v", again, err, tok)
	}
	os.Chmod(filepath.Join(dir, TokenFile), 0o644)
	if _, err := LoadOrCreateToken(dir); err == nil {
		t.Errorf("a world-readable token file was accepted")
	}
	os.WriteFile(filepath.Join(dir, TokenFile), []byte("MODAL_TOKEN_ID=x\n"), 0o600)
	os.Chmod(filepath.Join(dir, TokenFile), 0o600)
	if _, err := LoadOrCreateToken(dir); err == nil {
		t.Errorf("a token file without a pair was accepted")
	}
}
