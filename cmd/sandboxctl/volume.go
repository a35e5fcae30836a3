package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/proliferate-ai/sandbox-mcp/provider/engine"
)

// VolumeOptions are the parsed arguments of `volume create|list|rm`.
type VolumeOptions struct {
	Ctx      context.Context
	Factory  *Factory
	Name     string
	Capacity string
	Labels   []string
}

// NewCmdVolume builds `volume`: named volumes that outlive every sandbox.
func NewCmdVolume(f *Factory, runF func(*VolumeOptions) error) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "volume",
		Short: "Create, list and remove named volumes that outlive every sandbox",
		Example: "  sandboxctl volume create data --capacity 2G\n" +
			"  sandboxctl create --volume data:/home/user/data\n" +
			"  sandboxctl volume rm data",
		Long: "A volume is storage of its own with a capacity that holds (writes past it get ENOSPC\n" +
			"inside). `create --volume NAME:/path[:ro]` mounts it; several sandboxes may mount one\n" +
			"volume at once, read-write or read-only, and its data outlives them all.",
		Args: cobra.NoArgs,
	}
	cmd.AddCommand(newCmdVolumeCreate(f, runF), newCmdVolumeList(f, runF), newCmdVolumeRm(f, runF))
	return cmd
}

func newCmdVolumeCreate(f *Factory, runF func(*VolumeOptions) error) *cobra.Command {
	o := &VolumeOptions{Factory: f}
	cmd := &cobra.Command{
		Use:   "create NAME [--capacity SIZE] [--label K=V]...",
		Short: "Create a volume; print its name",
		Example: "  sandboxctl volume create data --capacity 2G --label team=web\n" +
			"  sandboxctl create --volume data:/home/user/data",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.Ctx, o.Name = cmd.Context(), args[0]
			return runOr(o, runF, volumeCreateRun)
		},
	}
	cmd.Flags().StringVar(&o.Capacity, "capacity", "", "capacity, like 512M or 2G (default 1G)")
	cmd.Flags().StringArrayVar(&o.Labels, "label", nil, "label KEY=VALUE (repeatable)")
	return cmd
}

func newCmdVolumeList(f *Factory, runF func(*VolumeOptions) error) *cobra.Command {
	return &cobra.Command{
		Use:     "list",
		Short:   "List volumes: capacity, last mount and the sandboxes using each",
		Example: "  sandboxctl volume list --json",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return runOr(&VolumeOptions{Ctx: cmd.Context(), Factory: f}, runF, volumeListRun)
		},
	}
}

func newCmdVolumeRm(f *Factory, runF func(*VolumeOptions) error) *cobra.Command {
	return &cobra.Command{
		Use:     "rm NAME",
		Short:   "Remove a volume and its data (refused while a sandbox mounts it)",
		Example: "  sandboxctl volume rm data",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runOr(&VolumeOptions{Ctx: cmd.Context(), Factory: f, Name: args[0]}, runF, volumeRmRun)
		},
	}
}

// volumes is the backend's engine as engine.Volumes, or why it is not one.
func volumes(b openedBackend) (engine.Volumes, error) {
	v, ok := b.Engine.(engine.Volumes)
	if !ok || !b.Engine.Capabilities().Volumes {
		return nil, fmt.Errorf("this engine has no volumes (the local engine needs loop devices and e2fsprogs): %w", engine.ErrUnsupported)
	}
	return v, nil
}

func (o *VolumeOptions) spec() (engine.VolumeSpec, error) {
	spec := engine.VolumeSpec{Name: o.Name}
	if o.Capacity != "" {
		n, err := parseSize(o.Capacity)
		if err != nil {
			return spec, usageError{fmt.Errorf("--capacity: %w", err)}
		}
		spec.CapacityBytes = n
	}
	for _, l := range o.Labels {
		k, v, ok := strings.Cut(l, "=")
		if !ok || k == "" {
			return spec, usageError{fmt.Errorf("--label %q: want KEY=VALUE", l)}
		}
		if spec.Labels == nil {
			spec.Labels = map[string]string{}
		}
		spec.Labels[k] = v
	}
	return spec, nil
}

func volumeCreateRun(o *VolumeOptions) error {
	spec, err := o.spec()
	if err != nil {
		return err
	}
	return withBackend(o.Ctx, o.Factory, func(ctx context.Context, b openedBackend) (engine.VolumeInfo, error) {
		v, err := volumes(b)
		if err != nil {
			return engine.VolumeInfo{}, err
		}
		return v.CreateVolume(ctx, spec, false)
	}, func(w io.Writer, v engine.VolumeInfo) error {
		_, err := fmt.Fprintln(w, v.Name)
		return err
	})
}

func volumeListRun(o *VolumeOptions) error {
	return withBackend(o.Ctx, o.Factory, func(ctx context.Context, b openedBackend) ([]engine.VolumeInfo, error) {
		v, err := volumes(b)
		if err != nil {
			return nil, err
		}
		return v.ListVolumes(ctx)
	}, func(w io.Writer, vols []engine.VolumeInfo) error {
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "NAME\tCAPACITY\tLAST MOUNTED\tUSED BY")
		for _, v := range vols {
			used := strings.Join(v.UsedBy, ",")
			if used == "" {
				used = "-"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", v.Name, humanBytes(v.CapacityBytes), v.LastAccessed.Local().Format(time.DateTime), used)
		}
		return tw.Flush()
	})
}

func volumeRmRun(o *VolumeOptions) error {
	type removed struct {
		Removed string `json:"removed"`
	}
	return withBackend(o.Ctx, o.Factory, func(ctx context.Context, b openedBackend) (removed, error) {
		v, err := volumes(b)
		if err != nil {
			return removed{}, err
		}
		return removed{o.Name}, v.RemoveVolume(ctx, o.Name)
	}, func(w io.Writer, r removed) error {
		_, err := fmt.Fprintln(w, r.Removed)
		return err
	})
}
