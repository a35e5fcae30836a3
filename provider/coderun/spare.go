package coderun

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strings"
	"time"

	"github.com/proliferate-ai/sandbox-mcp/provider/engine"
	"github.com/proliferate-ai/sandbox-mcp/rules"
)

// Spare sandboxes: with Options.Spares, the runner keeps that many sandboxes booted
// from the snapshot, each with a fresh empty volume and its REPL up. A new session's
// first run_code adopts one (sandbox, REPL and volume) instead of waiting for a
// sandbox to boot, and a replacement boots in the background. A session that already
// has a volume boots its own sandbox, since its files are in that volume. Spares are
// kept in sessions.json under keys no session id can have, so they outlive the process
// like sessions do.

const sparePrefix = "#spare-"

func isSpare(key string) bool { return strings.HasPrefix(key, sparePrefix) }

// claimSpare gives a spare to a session without a volume; ok is false when there is
// none (or it died, and is dropped).
func (r *Runner) claimSpare(ctx context.Context, s *Session) (sessionState, bool) {
	if r.o.Spares <= 0 {
		return sessionState{}, false
	}
	if st, err := s.state(); err != nil || st.Volume != "" {
		return sessionState{}, false
	}
	if alive, err := r.volumeAlive(ctx, volumeName(s.id)); err != nil || alive {
		return sessionState{}, false
	}
	// The engine is asked outside the state lock (every call takes that lock): a
	// spare is picked under it, checked, and claimed under it if it is still there.
	var got sessionState
	for range 8 {
		var key string
		var sp sessionState
		if err := r.withState(func(m map[string]*sessionState) error {
			for k, p := range m {
				if isSpare(k) && p.Pid != 0 {
					key, sp = k, *p
					return nil
				}
			}
			return nil
		}); err != nil || key == "" {
			return sessionState{}, false
		}
		if info, err := r.eng.Get(ctx, sp.Sandbox); err != nil || info.State != engine.StateRunning {
			// A dead spare goes; the volume stays for Cleanup (it is registered
			// nowhere, so remove it now).
			_ = r.withState(func(m map[string]*sessionState) error {
				if p := m[key]; p != nil && p.Sandbox == sp.Sandbox {
					delete(m, key)
				}
				return nil
			})
			_ = r.eng.Terminate(ctx, sp.Sandbox)
			_ = r.removeVolume(ctx, sp.Volume)
			continue
		}
		claimed := false
		if err := r.withState(func(m map[string]*sessionState) error {
			p := m[key]
			if p == nil || p.Sandbox != sp.Sandbox {
				return nil // another call claimed it
			}
			delete(m, key)
			got = *p
			got.LastUsed = r.o.Now()
			m[s.id] = &got
			claimed = true
			return nil
		}); err != nil {
			return sessionState{}, false
		}
		if claimed {
			break
		}
	}
	if got.Sandbox == "" {
		return sessionState{}, false
	}
	if err := r.store.TouchVolume(ctx, got.Volume, s.id, r.o.Now()); err != nil {
		r.log.Warn("register spare volume", "err", err)
	}
	r.refillSpares()
	return got, true
}

// refillSpares boots missing spares in the background (owned by the Runner: Close
// waits for it).
func (r *Runner) refillSpares() {
	if r.o.Spares <= 0 {
		return
	}
	r.mu.Lock()
	if r.filling || r.closed {
		r.mu.Unlock()
		return
	}
	r.filling = true
	r.wg.Add(1)
	r.mu.Unlock()
	go func() {
		defer r.wg.Done()
		defer func() {
			r.mu.Lock()
			r.filling = false
			r.mu.Unlock()
		}()
		ctx, cancel := context.WithTimeout(r.ctx, 10*time.Minute)
		defer cancel()
		if err := r.FillSpares(ctx); err != nil {
			r.log.Warn("boot a spare sandbox", "err", err)
		}
	}()
}

// FillSpares boots spares until Options.Spares are ready.
func (r *Runner) FillSpares(ctx context.Context) error {
	for {
		n := 0
		if err := r.withState(func(m map[string]*sessionState) error {
			for key := range m {
				if isSpare(key) {
					n++
				}
			}
			return nil
		}); err != nil {
			return err
		}
		if n >= r.o.Spares {
			return nil
		}
		if err := r.bootSpare(ctx); err != nil {
			return err
		}
	}
}

func (r *Runner) bootSpare(ctx context.Context) error {
	snap, err := r.EnsureSnapshot(ctx)
	if err != nil {
		return err
	}
	var b [8]byte
	_, _ = rand.Read(b[:])
	key := sparePrefix + hex.EncodeToString(b[:])
	vol := "coderun-" + hex.EncodeToString(b[:])
	spec, err := r.sandboxSpec(ctx, snap, vol, key)
	if err != nil {
		return err
	}
	info, err := r.eng.Create(ctx, spec)
	if err != nil {
		return fmt.Errorf("create a spare sandbox: %w", secretsHint(spec, err))
	}
	pid, err := r.startREPL(ctx, info.ID, rules.CoderunWorkspace)
	if err == nil {
		err = r.withState(func(m map[string]*sessionState) error {
			m[key] = &sessionState{Sandbox: info.ID, Volume: vol, Pid: pid, LastUsed: r.o.Now()}
			return nil
		})
	}
	if err == nil {
		r.mu.Lock()
		r.ownSpares[key] = true
		r.mu.Unlock()
	}
	if err != nil {
		_ = r.eng.Terminate(context.WithoutCancel(ctx), info.ID)
		_ = r.removeVolume(context.WithoutCancel(ctx), vol)
	}
	return err
}

// DropSpares terminates the spares and deletes their volumes.
func (r *Runner) DropSpares(ctx context.Context) error {
	return r.dropSpares(ctx, func(string) bool { return true })
}

// dropOwnSpares ends the unclaimed spares this runner booted: a process that exits
// leaves none running (those of a process that died are reaped as idle by the next
// one, after IdleTimeout).
func (r *Runner) dropOwnSpares(ctx context.Context) error {
	r.mu.Lock()
	own := r.ownSpares
	r.ownSpares = map[string]bool{}
	r.mu.Unlock()
	if len(own) == 0 {
		return nil
	}
	return r.dropSpares(ctx, func(key string) bool { return own[key] })
}

// dropSpares terminates the spares whose key which accepts, outside the state lock.
func (r *Runner) dropSpares(ctx context.Context, which func(key string) bool) error {
	var spares []sessionState
	err := r.withState(func(m map[string]*sessionState) error {
		for key, sp := range m {
			if isSpare(key) && which(key) {
				spares = append(spares, *sp)
				delete(m, key)
			}
		}
		return nil
	})
	for _, sp := range spares {
		if terr := r.eng.Terminate(ctx, sp.Sandbox); terr != nil && err == nil {
			err = terr
		}
		if verr := r.removeVolume(ctx, sp.Volume); verr != nil && err == nil {
			err = verr
		}
	}
	return err
}
