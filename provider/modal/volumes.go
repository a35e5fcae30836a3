package modal

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"time"

	modalsdk "github.com/modal-labs/modal-client/go"
	pb "github.com/modal-labs/modal-client/go/proto/modal_proto"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/proliferate-ai/sandbox-mcp/provider"
	"github.com/proliferate-ai/sandbox-mcp/provider/engine"
)

// Volumes: engine.Volumes on Modal Volumes. An engine volume is the Modal Volume of the
// same name in the client's environment. Modal knows neither a volume's capacity nor
// its labels, nor which sandboxes mount it, so:
//   - VolumeSpec.CapacityBytes and Labels are not kept (VolumeInfo.CapacityBytes is 0:
//     unknown; a Modal Volume grows as it is written);
//   - the sandboxes this adapter creates carry their mounts in tags (volumeTag per
//     volume, mountsTag with the list), from which GetVolume's UsedBy (the app's
//     running sandboxes with the volume's tag) and Info.Volumes come; RemoveVolume
//     refuses a volume one of them mounts with engine.ErrInUse. A sandbox made
//     elsewhere that mounts the volume is not seen;
//   - LastAccessed is zero (unknown).
//
// The Go SDK has no volume list; ListVolumes calls VolumeList on the SDK's own
// control-plane connection (captureConn), so auth, headers and retries stay the SDK's.

var _ engine.Volumes = (*Engine)(nil)

// Tags the adapter puts on a sandbox that mounts volumes.
const (
	// volumeTag + name is "1" on every sandbox that mounts the volume (a tag filter).
	volumeTag = "engine.volume."
	// mountsTag holds the sandbox's mounts as JSON (engine.VolumeMount list).
	mountsTag = "engine.volumes"
)

func isVolumeTag(k string) bool { return k == mountsTag || strings.HasPrefix(k, volumeTag) }

// captureConn is a unary interceptor that keeps the connection of the SDK's first
// control-plane call (its AppGetOrCreate, which connect always makes first).
func (p *Engine) captureConn(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	if method == pb.ModalClient_AppGetOrCreate_FullMethodName {
		p.cpMu.Lock()
		if p.cp == nil {
			p.cp = cc
		}
		p.cpMu.Unlock()
	}
	return invoker(ctx, method, req, reply, cc, opts...)
}

// controlPlane is the SDK's control-plane client (after connect).
func (p *Engine) controlPlane(ctx context.Context, op provider.Operation) (pb.ModalClientClient, error) {
	if _, _, err := p.connect(ctx, op); err != nil {
		return nil, err
	}
	p.cpMu.Lock()
	defer p.cpMu.Unlock()
	if p.cp == nil {
		return nil, errors.New("modal: the SDK's control-plane connection is not known")
	}
	return pb.NewModalClientClient(p.cp), nil
}

// volumeErr maps the SDK's and the server's answers to engine errors.
func volumeErr(name string, err error) error {
	var nf modalsdk.NotFoundError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &nf) || status.Code(err) == codes.NotFound:
		return fmt.Errorf("volume %s: %w: %v", name, engine.ErrNotFound, err)
	case status.Code(err) == codes.FailedPrecondition && strings.Contains(err.Error(), "in use"):
		return fmt.Errorf("volume %s: %w: %v", name, engine.ErrInUse, err)
	}
	return fmt.Errorf("volume %s: %w", name, err)
}

// CreateVolume creates the Modal Volume name (capacity and labels are not kept).
func (e *Engine) CreateVolume(ctx context.Context, spec engine.VolumeSpec, ifMissing bool) (engine.VolumeInfo, error) {
	c, _, err := e.connect(ctx, provider.OpCreateSandbox)
	if err != nil {
		return engine.VolumeInfo{}, err
	}
	if !ifMissing {
		// The SDK has no create-or-fail: look first.
		_, err := c.Volumes.FromName(ctx, spec.Name, nil)
		if err == nil {
			return engine.VolumeInfo{}, fmt.Errorf("volume %s: %w", spec.Name, engine.ErrNameTaken)
		}
		if err := volumeErr(spec.Name, err); !errors.Is(err, engine.ErrNotFound) {
			return engine.VolumeInfo{}, err
		}
	}
	if _, err := c.Volumes.FromName(ctx, spec.Name, &modalsdk.VolumeFromNameParams{CreateIfMissing: true}); err != nil {
		return engine.VolumeInfo{}, volumeErr(spec.Name, err)
	}
	return e.GetVolume(ctx, spec.Name)
}

// GetVolume describes the volume: its creation time, and the running sandboxes of the
// app that this adapter created with it mounted.
func (e *Engine) GetVolume(ctx context.Context, name string) (engine.VolumeInfo, error) {
	list, err := e.ListVolumes(ctx)
	if err != nil {
		return engine.VolumeInfo{}, err
	}
	i := slices.IndexFunc(list, func(v engine.VolumeInfo) bool { return v.Name == name })
	if i < 0 {
		return engine.VolumeInfo{}, fmt.Errorf("volume %s: %w", name, engine.ErrNotFound)
	}
	v := list[i]
	if v.UsedBy, err = e.volumeUsers(ctx, name); err != nil {
		return engine.VolumeInfo{}, err
	}
	return v, nil
}

// volumeUsers are the app's running sandboxes tagged as mounting name.
func (e *Engine) volumeUsers(ctx context.Context, name string) ([]string, error) {
	c, app, err := e.connect(ctx, provider.OpCheckSandboxes)
	if err != nil {
		return nil, err
	}
	seq, err := c.Sandboxes.List(ctx, &modalsdk.SandboxListParams{AppID: app.AppID, Tags: map[string]string{volumeTag + name: "1"}})
	if err != nil {
		return nil, err
	}
	var users []string
	for sb, err := range seq {
		if err != nil {
			return nil, err
		}
		users = append(users, sb.SandboxID)
	}
	return users, nil
}

// ListVolumes lists the environment's named volumes (UsedBy is GetVolume's).
func (e *Engine) ListVolumes(ctx context.Context) ([]engine.VolumeInfo, error) {
	cp, err := e.controlPlane(ctx, provider.OpCheckSandboxes)
	if err != nil {
		return nil, err
	}
	resp, err := cp.VolumeList(ctx, pb.VolumeListRequest_builder{EnvironmentName: environment()}.Build())
	if err != nil {
		return nil, fmt.Errorf("list volumes: %w", err)
	}
	out := []engine.VolumeInfo{}
	for _, it := range resp.GetItems() {
		sec := it.GetCreatedAt()
		out = append(out, engine.VolumeInfo{Name: it.GetLabel(),
			Created: time.Unix(int64(sec), int64((sec-float64(int64(sec)))*1e9))})
	}
	return out, nil
}

// RemoveVolume deletes the volume and its data; one that a running sandbox of this
// adapter mounts is refused with engine.ErrInUse (so is one the server says is in use).
func (e *Engine) RemoveVolume(ctx context.Context, name string) error {
	users, err := e.volumeUsers(ctx, name)
	if err != nil {
		return err
	}
	if len(users) > 0 {
		return fmt.Errorf("volume %s is mounted by %s: %w", name, strings.Join(users, ", "), engine.ErrInUse)
	}
	c, _, err := e.connect(ctx, provider.OpTerminate)
	if err != nil {
		return err
	}
	return volumeErr(name, c.Volumes.Delete(ctx, name, nil))
}

// environment is the SDK's environment (MODAL_ENVIRONMENT; empty: the default).
func environment() string { return strings.TrimSpace(os.Getenv("MODAL_ENVIRONMENT")) }

// mountVolumes adds spec's volumes to params: each Modal Volume at its target, and the
// tags that record the mounts.
func (e *Engine) mountVolumes(ctx context.Context, c *modalsdk.Client, spec engine.Spec, params *modalsdk.SandboxCreateParams) error {
	if len(spec.Volumes) == 0 {
		return nil
	}
	params.Volumes = map[string]*modalsdk.Volume{}
	if params.Tags == nil {
		params.Tags = map[string]string{}
	}
	for _, m := range spec.Volumes {
		if _, taken := params.Volumes[m.Target]; taken {
			return fmt.Errorf("two volumes at %s", m.Target)
		}
		v, err := c.Volumes.FromName(ctx, m.Name, nil)
		if err != nil {
			return volumeErr(m.Name, err)
		}
		ro := m.ReadOnly
		params.Volumes[m.Target] = v.WithMountOptions(&modalsdk.VolumeMountOptionsParams{ReadOnly: &ro})
		params.Tags[volumeTag+m.Name] = "1"
	}
	b, err := json.Marshal(spec.Volumes)
	if err != nil {
		return err
	}
	params.Tags[mountsTag] = string(b)
	return nil
}

// splitTags separates a sandbox's tags into its labels and its volume mounts.
func splitTags(tags map[string]string) (map[string]string, []engine.VolumeMount) {
	var mounts []engine.VolumeMount
	if s, ok := tags[mountsTag]; ok {
		_ = json.Unmarshal([]byte(s), &mounts) // a tag someone else set: no mounts
	}
	labels := maps.Clone(tags)
	maps.DeleteFunc(labels, func(k, _ string) bool { return isVolumeTag(k) })
	return labels, mounts
}
